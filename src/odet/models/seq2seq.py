"""The encoder–decoder ODE Transformer — one file, read top to bottom.

::

    src (B, S) ─► embed·√D + positions ─► encoder stack (blocks of `encoder_method`) ─► LN ─► memory
    tgt (B, T) ─► embed·√D + positions ─► decoder stack (blocks of `decoder_method`,
                                          cross-attending to memory)           ─► LN ─► logits

Each stack is an integrator: ``encoder_method="euler"`` is the ordinary pre-norm Transformer,
``"rk2"``/``"rk4"``… evaluate one shared layer per block at several stages. Decoding is either
teacher-forced (``forward``) or incremental with a ``DecoderState`` whose self-attention caches are
keyed by (block, stage), so RK decoders decode exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, overload

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from odet.blocks import STAGE_CACHES, Stack, build_stack
from odet.generation import Hypothesis, SearchStrategy, generate, make_strategy
from odet.generation.strategies import check_flag
from odet.models.config import Seq2SeqConfig
from odet.models.encoder import Encoder, build_encoder
from odet.models.serialization import load_model_dir, save_model_dir
from odet.nn import (
    DecoderField,
    DecoderState,
    Dropout,
    KVCache,
    SinusoidalPositions,
    TokenEmbedding,
)
from odet.ode import SolveStats


@dataclass
class EncoderOutput:
    """``memory (B, S, D)`` and its ``padding_mask (B, S)`` (True at padding); ``stats`` of the
    ODE solves (NFE, arclength per sample) when the encoder is continuous."""

    memory: Tensor
    padding_mask: Tensor
    stats: SolveStats | None = None

    def reorder(self, index: Tensor) -> EncoderOutput:
        return EncoderOutput(
            self.memory.index_select(0, index), self.padding_mask.index_select(0, index)
        )


class Seq2Seq(nn.Module):
    """Encoder–decoder Transformer whose stacks are ODE integrators (see module docstring).

    Example:
        >>> import torch
        >>> from odet.models import Seq2Seq, Seq2SeqConfig
        >>> cfg = Seq2SeqConfig(vocab_size=100, d_model=32, num_heads=4, ffn_dim=64,
        ...                     encoder_layers=2, decoder_layers=2, encoder_method="rk2",
        ...                     coefficients="gated")
        >>> model = Seq2Seq(cfg).eval()
        >>> src = torch.randint(4, 100, (3, 7))
        >>> model(src, torch.full((3, 5), cfg.bos_id)).shape
        torch.Size([3, 5, 100])
    """

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        self.config = c = config
        self.src_embed = TokenEmbedding(c.vocab_size, c.d_model, c.pad_id, c.scale_embeddings)
        self.tgt_embed = (
            self.src_embed
            if c.share_all_embeddings
            else TokenEmbedding(c.target_vocab_size, c.d_model, c.pad_id, c.scale_embeddings)
        )
        self.positions = (
            None if c.positions == "relative" else SinusoidalPositions(c.max_positions, c.d_model)
        )
        self.embed_dropout = Dropout(c.dropout)

        spec = c.field_spec
        self.encoder: Encoder = build_encoder(
            c.encoder_method,
            spec,
            c.encoder_layers,
            stack=c.stack_options(c.coefficients, c.encoder_history),
            continuous=c.continuous,
        )
        self.encoder_norm = nn.LayerNorm(c.d_model, eps=c.norm_eps)
        self.decoder = build_stack(
            c.decoder_method,
            lambda: DecoderField(**asdict(c.decoder_field_spec)),
            c.decoder_layers,
            **asdict(c.stack_options(c.decoder_scheme, c.decoder_history)),
        )
        self.decoder_norm = nn.LayerNorm(c.d_model, eps=c.norm_eps)
        self.output_projection = nn.Linear(c.d_model, c.target_vocab_size, bias=False)
        self._init_weights()
        if c.share_decoder_embeddings or c.share_all_embeddings:
            self.output_projection.weight = self.tgt_embed.weight

    def _init_weights(self) -> None:
        """Xavier-uniform projections with zero biases; embeddings keep ``N(0, D^-1/2)``."""
        for module in self.modules():
            if isinstance(module, nn.Linear) and module is not self.output_projection:
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        nn.init.normal_(self.output_projection.weight, std=self.config.d_model**-0.5)

    def set_activation_checkpointing(self, enabled: bool = True) -> None:
        """Checkpoint every encoder and decoder block in training forwards (``Stack``).

        Memory for compute: each block keeps only its input and recomputes its stages in the
        backward pass, so an RK4 encoder trains in about an Euler encoder's activation memory.
        Outputs and gradients are unchanged (dropout masks are replayed); cached decoding and
        no-grad forwards are unaffected. A continuous encoder is left as it is.
        """
        for stack in (self.encoder, self.decoder):
            if isinstance(stack, Stack):
                stack.checkpoint_blocks = enabled

    # ------------------------------------------------------------------ encoder
    def encode(self, src_tokens: Tensor) -> EncoderOutput:
        """``src_tokens (B, S)`` → memory ``(B, S, D)`` and its padding mask."""
        self._check_tokens("src_tokens", src_tokens, self.config.vocab_size)
        padding_mask = src_tokens.eq(self.config.pad_id)  # (B, S)
        if not torch.compiler.is_compiling() and padding_mask.all(dim=1).any():
            empty = padding_mask.all(dim=1).nonzero().flatten().tolist()
            raise ValueError(f"src_tokens rows {empty} contain only padding (empty sources)")
        x = self.src_embed(src_tokens)  # (B, S, D)
        if self.positions is not None:
            x = x + self.positions(src_tokens.shape[1])
        x = self.embed_dropout(x)
        out = self.encoder.integrate(x, padding_mask=padding_mask)
        return EncoderOutput(self.encoder_norm(out.y), padding_mask, out.stats)

    # ------------------------------------------------------------------ decoder
    def init_state(self, encoder_out: EncoderOutput) -> DecoderState:
        """A fresh incremental-decoding state: each block's memory keys/values projected once,
        and one empty self-attention cache per (block, stage)."""
        stages = self.decoder.stage_counts
        return DecoderState(
            self_attn={(l, i): KVCache() for l, count in enumerate(stages) for i in range(count)},
            memory_kv={
                l: block.field.project_memory(encoder_out.memory)
                for l, block in enumerate(self.decoder.blocks)
            },
            memory_padding_mask=encoder_out.padding_mask,
            stage_counts=stages,
        )

    def decode(
        self,
        tgt_tokens: Tensor,
        encoder_out: EncoderOutput | None = None,
        state: DecoderState | None = None,
    ) -> Tensor:
        """Logits ``(B, T, V)`` for decoder inputs ``tgt_tokens (B, T)``.

        Without ``state`` the whole prefix is decoded (teacher forcing). With ``state`` only the
        new positions are given; they are appended to the caches and ``state.length`` advances.
        """
        self._check_tokens("tgt_tokens", tgt_tokens, self.config.target_vocab_size)
        batch = tgt_tokens.shape[0]
        if state is not None:
            state.check_batch(batch)
        elif encoder_out is None:
            raise ValueError("decode needs encoder_out (teacher forcing) or a DecoderState")
        else:
            self._check_encoder_out(encoder_out, batch)
        return self._decode(tgt_tokens, encoder_out, state)

    def _decode(
        self,
        tgt_tokens: Tensor,
        encoder_out: EncoderOutput | None = None,
        state: DecoderState | None = None,
    ) -> Tensor:
        """``decode`` without the input checks: what generation runs at every step, on tokens it
        chose itself (the ids check would cost a device-to-host sync per step)."""
        offset = 0 if state is None else state.length
        x = self.tgt_embed(tgt_tokens)  # (B, T, D)
        if self.positions is not None:
            x = x + self.positions(tgt_tokens.shape[1], offset)
        x = self.embed_dropout(x)
        if state is None:
            assert encoder_out is not None, "checked by decode"
            block_kwargs = [
                {"memory_kv": block.field.project_memory(encoder_out.memory)}
                for block in self.decoder.blocks
            ]
            memory_padding_mask = encoder_out.padding_mask
        else:
            block_kwargs = [
                {"memory_kv": state.memory_kv[l], STAGE_CACHES: state.block_caches(l)}
                for l in range(len(self.decoder.blocks))
            ]
            memory_padding_mask = state.memory_padding_mask
        x = self.decoder(x, block_kwargs=block_kwargs, memory_padding_mask=memory_padding_mask)
        if state is not None:
            state.length += tgt_tokens.shape[1]
        return self.output_projection(self.decoder_norm(x))

    @overload
    def forward(
        self, src_tokens: Tensor, tgt_tokens: Tensor, *, with_stats: Literal[False] = False
    ) -> Tensor: ...

    @overload
    def forward(
        self, src_tokens: Tensor, tgt_tokens: Tensor, *, with_stats: Literal[True]
    ) -> tuple[Tensor, SolveStats | None]: ...

    def forward(
        self, src_tokens: Tensor, tgt_tokens: Tensor, *, with_stats: bool = False
    ) -> Tensor | tuple[Tensor, SolveStats | None]:
        """Teacher-forced logits ``(B, T, V)``; ``tgt_tokens`` starts with BOS. With
        ``with_stats`` also the continuous encoder's ``SolveStats`` (None for discrete stacks),
        through ``forward`` so that data-parallel wrappers see the call."""
        encoder_out = self.encode(src_tokens)
        logits = self.decode(tgt_tokens, encoder_out)
        return (logits, encoder_out.stats) if with_stats else logits

    # ------------------------------------------------------------------ generation
    def incremental_decoder(
        self, encoder_out: EncoderOutput, use_cache: bool = True, *, compile: bool = False
    ) -> Seq2SeqDecoder:
        """The model as an ``odet.generation.IncrementalDecoder`` over one encoded batch;
        ``compile`` runs its cached steps under ``torch.compile`` (``Seq2SeqDecoder``)."""
        return Seq2SeqDecoder(self, encoder_out, use_cache, compile=compile)

    @torch.no_grad()
    def generate(
        self,
        src_tokens: Tensor,
        beam_size: int = 1,
        max_len: int | None = None,
        use_cache: bool = True,
        *,
        min_len: int = 0,
        length_penalty: float = 1.0,
        no_repeat_ngram_size: int = 0,
        compile: bool = False,
    ) -> list[list[int]]:
        """Translate a batch: the best hypothesis per source, as token ids without BOS/EOS.

        ``beam_size=1`` is greedy search. ``max_len`` (default ``2·S + 10``, capped by the
        position table) bounds the generated tokens excluding EOS. ``use_cache=False``
        recomputes the decoder over the whole prefix at every step and returns the same tokens.
        ``compile`` runs the cached decoder steps under ``torch.compile`` (same tokens).
        """
        strategy = make_strategy(
            "beam",
            beam_size=beam_size,
            length_penalty=length_penalty,
            no_repeat_ngram_size=no_repeat_ngram_size,
        )
        nbest = self.search(
            src_tokens, strategy, max_len, use_cache, min_len=min_len, compile=compile
        )
        return [hyps[0].tokens if hyps else [] for hyps in nbest]

    @torch.no_grad()
    def search(
        self,
        src_tokens: Tensor,
        strategy: SearchStrategy,
        max_len: int | None = None,
        use_cache: bool = True,
        *,
        min_len: int = 0,
        compile: bool = False,
    ) -> list[list[Hypothesis]]:
        """Run any search strategy (greedy, beam, sampling); n-best lists per source;
        ``compile``: cached decoder steps under ``torch.compile``."""
        check_flag("use_cache", use_cache)
        check_flag("compile", compile)
        if isinstance(max_len, int) and isinstance(min_len, int) and 0 <= max_len < min_len:
            raise ValueError(f"min_len ({min_len}) must be <= max_len ({max_len})")
        encoder_out = self.encode(src_tokens)
        if max_len is None:
            max_len = 2 * src_tokens.shape[1] + 10
        max_len = min(max_len, self.config.max_positions - 1)
        return generate(
            self.incremental_decoder(encoder_out, use_cache, compile=compile),
            src_tokens.shape[0],
            strategy,
            bos_id=self.config.bos_id,
            eos_id=self.config.eos_id,
            pad_id=self.config.pad_id,
            max_len=max_len,
            min_len=min(min_len, max_len),
            device=src_tokens.device,
        )

    # ------------------------------------------------------------------ checkpoints
    def save_pretrained(self, path: str | Path) -> Path:
        """Write ``config.json`` and ``model.safetensors`` to directory ``path``."""
        return save_model_dir(self, self.config.to_dict(), path, model_type="seq2seq")

    @classmethod
    def from_pretrained(cls, path: str | Path, map_location: str | torch.device = "cpu") -> Seq2Seq:
        """Load a model written by ``save_pretrained`` (no pickle: JSON + safetensors)."""
        return load_model_dir(
            path,
            model_type="seq2seq",
            build=lambda data: cls(Seq2SeqConfig.from_dict(data)),
            map_location=map_location,
        )

    def num_parameters(self) -> int:
        """Distinct trainable parameters (shared embeddings and gates counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    # ------------------------------------------------------------------ input checks
    def _check_encoder_out(self, encoder_out: EncoderOutput, batch: int) -> None:
        """``encoder_out`` is this model's encoding of ``batch`` sources: a mismatch would
        broadcast in cross-attention (one source's memory read by every target row)."""
        if not isinstance(encoder_out, EncoderOutput):
            raise TypeError(
                f"encoder_out must be the EncoderOutput of encode(src_tokens), got "
                f"{type(encoder_out).__name__}"
            )
        memory, mask = encoder_out.memory, encoder_out.padding_mask
        d_model = self.config.d_model
        if memory.dim() != 3 or memory.shape[2] != d_model or not memory.is_floating_point():
            raise ValueError(
                f"encoder_out.memory must be a floating (batch, src_len, d_model={d_model}) "
                f"tensor, got {memory.dtype} {tuple(memory.shape)}"
            )
        if memory.shape[0] != batch:
            raise ValueError(
                f"tgt_tokens has batch size {batch} but encoder_out encodes {memory.shape[0]} "
                "sources; decode each target with the encoding of its own source"
            )
        dtype = self.decoder_norm.weight.dtype
        if memory.dtype != dtype and not torch.is_autocast_enabled(memory.device.type):
            raise ValueError(
                f"encoder_out.memory is {memory.dtype} but the model is {dtype}; encode with "
                "this model, or convert one of them"
            )
        if mask.dtype != torch.bool or mask.shape != memory.shape[:2]:
            raise ValueError(
                f"encoder_out.padding_mask must be a bool (batch, src_len) = "
                f"{tuple(memory.shape[:2])} tensor, True at padding, got {mask.dtype} "
                f"{tuple(mask.shape)}"
            )

    def _check_tokens(self, name: str, tokens: Tensor, vocab_size: int) -> None:
        if not isinstance(tokens, Tensor):
            raise TypeError(
                f"{name} must be a torch.Tensor of token ids, got {type(tokens).__name__}"
            )
        if tokens.dtype not in (torch.int64, torch.int32):
            raise TypeError(
                f"{name} must be an integer tensor of token ids (torch.long), got {tokens.dtype}"
            )
        if tokens.dim() != 2:
            raise ValueError(f"{name} must have shape (batch, length), got {tuple(tokens.shape)}")
        if tokens.numel() == 0:
            raise ValueError(f"{name} is an empty batch (shape {tuple(tokens.shape)})")
        if tokens.shape[1] > self.config.max_positions:
            raise ValueError(
                f"{name} has length {tokens.shape[1]}, longer than the model's max_positions="
                f"{self.config.max_positions}; truncate the input"
            )
        if torch.compiler.is_compiling():
            return  # the id range check reads values (a graph break); eager calls still check
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ValueError(
                f"{name} contains token id {bad} outside the vocabulary [0, {vocab_size})"
            )


def next_log_probs(model: Seq2Seq, tokens: Tensor, state: DecoderState) -> Tensor:
    """One cached decoder step: the newest tokens ``(N, 1)`` through the decoder and ``state``
    (which advances) → next-token log-probabilities ``(N, V)``, fp32 for half-precision logits.
    What ``Seq2SeqDecoder`` runs eagerly or under ``torch.compile``."""
    logits = model._decode(tokens, state=state)[:, -1]
    dtype = torch.float32 if logits.dtype in (torch.float16, torch.bfloat16) else None
    return F.log_softmax(logits, dim=-1, dtype=dtype)


_compiled_next_log_probs: Callable[[Seq2Seq, Tensor, DecoderState], Tensor] | None = None


def compiled_next_log_probs() -> Callable[[Seq2Seq, Tensor, DecoderState], Tensor]:
    """``next_log_probs`` under ``torch.compile(dynamic=True)``, built once per process.

    Dynamic shapes keep one graph for every batch size and cache length (the caches grow by
    one position per step, beam search resizes the batch); the parameters are graph inputs, so
    models of one architecture share it.
    """
    global _compiled_next_log_probs
    if _compiled_next_log_probs is None:
        _compiled_next_log_probs = torch.compile(next_log_probs, dynamic=True)
    return _compiled_next_log_probs


class Seq2SeqDecoder:
    """``IncrementalDecoder`` adapter: next-token log-probabilities for the generation loop.

    With ``use_cache`` each step feeds only the newest token through the decoder and its
    ``DecoderState``; without, each step decodes the whole prefix again (the reference the cached
    path must match). ``reorder`` follows beam expansion, pruning and finished sentences.

    With ``compile`` (cached only) the steps run ``next_log_probs`` under ``torch.compile``
    from the third on: the first two stay eager, so that the one compiled graph sees the beams'
    layout of the memory (the first step has one row per sentence) and caches longer than one
    position (a length of 1 would be specialised into a graph of its own).
    """

    def __init__(
        self, model: Seq2Seq, encoder_out: EncoderOutput, use_cache: bool, *, compile: bool = False
    ):
        self.model = model
        self.encoder_out = encoder_out
        self.state = model.init_state(encoder_out) if use_cache else None
        self.compile = compile and use_cache

    def step(self, prefix: Tensor) -> Tensor:
        """``prefix (N, t)`` starting with BOS → log-probabilities ``(N, V)`` of the next token."""
        if self.state is None:
            logits = self.model._decode(prefix, self.encoder_out)[:, -1]
        else:
            if prefix.shape[1] != self.state.length + 1:
                raise ValueError(
                    f"cached decoder has seen {self.state.length} positions but got a prefix of "
                    f"{prefix.shape[1]}; each step must add exactly one token"
                )
            if self.compile and self.state.length >= 2:
                tokens = prefix[:, -1:].clone(memory_format=torch.contiguous_format)  # (N, 1)
                return compiled_next_log_probs()(self.model, tokens, self.state)
            return next_log_probs(self.model, prefix[:, -1:], self.state)
        dtype = torch.float32 if logits.dtype in (torch.float16, torch.bfloat16) else None
        return F.log_softmax(logits, dim=-1, dtype=dtype)

    def reorder(self, index: Tensor, rows_per_source: int) -> None:
        if self.state is None:
            self.encoder_out = self.encoder_out.reorder(index)
        else:  # the state holds all the cached path reads of the encoder output
            self.state.reorder(index, rows_per_source=rows_per_source)
