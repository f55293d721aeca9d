"""The decoder-only ODE Transformer language model — one file, read top to bottom.

::

    tokens (B, T) ─► embed + positions ─► stack of `method` blocks (causal fields) ─► LN ─► logits

The stack is an integrator, as in :mod:`odet.models.seq2seq`: ``method="euler"`` is the ordinary
pre-norm GPT, ``"rk2"``/``"rk4"``… evaluate one shared causal layer per block at several stages.
Incremental decoding keeps one self-attention cache per (block, stage) in a
:class:`~odet.nn.DecoderState` (with no encoder memory), so every block family decodes exactly.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor, nn

from odet.blocks import (
    STACK_METHODS,
    STAGE_CACHES,
    CoefficientScheme,
    LayerHistory,
    StackOptions,
    build_stack,
    coefficient_problem,
    history_problem,
)
from odet.config import INT_MAX, check, check_types, from_dict, suggest, to_dict
from odet.generation import Sampling
from odet.generation.strategies import check_flag, check_generator_seed
from odet.models.config import check_layers
from odet.models.serialization import load_model_dir, save_model_dir
from odet.nn import (
    Activation,
    CausalField,
    DecoderState,
    Dropout,
    FieldConvention,
    FieldSpec,
    KVCache,
    SinusoidalPositions,
    StaticKVCache,
)

STATIC_QUANTUM = 64
"""Compiled sampling sizes its static caches to the positions it needs rounded up to a multiple
of this (at most ``block_size``): shorter attention rows than ``block_size``, few recompiles."""


@dataclass
class StaticState:
    """What the compiled decoding step reads and writes: one ``StaticKVCache`` per (block,
    stage), ``caches[block][stage]``, all sharing the write ``position`` (0-dim long)."""

    caches: list[list[StaticKVCache]]
    position: Tensor

    @classmethod
    def of(cls, state: DecoderState, capacity: int) -> StaticState:
        """The caches of ``state`` copied into buffers of ``capacity`` positions."""
        first = state.self_attn[(0, 0)].key
        position = torch.tensor(state.length, device=None if first is None else first.device)
        caches = [
            [StaticKVCache.filled(c, capacity, position) for c in state.block_caches(l)]
            for l in range(len(state.stage_counts))
        ]
        return cls(caches, position)


LMPositions = Literal["learned", "sinusoidal", "relative"]
"""How a language model sees positions: a learned absolute table (GPT), fixed sinusoids, or
relative representations in every self-attention (Shaw et al.; no absolute positions)."""
LM_POSITIONS: tuple[LMPositions, ...] = typing.get_args(LMPositions)


@dataclass(frozen=True)
class CausalLMConfig:
    """A decoder-only ODE Transformer language model.

    ``method`` names the stack's integrator (any ``odet.blocks.STACK_METHODS`` name; the
    continuous N-ODE stack is not supported for language models yet). ``coefficients`` weighs
    the stages of the blocks that have weights; a scheme the method cannot use is an error.
    """

    vocab_size: int
    """Vocabulary size ``V`` (every id in ``[0, V)`` is a token; there is no padding id)."""
    d_model: int = 128
    """Feature width ``D``."""
    num_heads: int = 4
    """Attention heads per layer."""
    ffn_dim: int = 512
    """Hidden width of the feed-forward sublayers."""
    layers: int = 4
    """Blocks of the stack (each over its own layer; at most 10,000)."""
    method: str = "euler"
    """The stack's integrator: a name of ``STACK_METHODS``."""
    coefficients: CoefficientScheme = "fixed"
    """How blocks weigh their stages (``odet.blocks.COEFFICIENTS``)."""
    share_gate: bool = False
    """One RK2 gate for the whole stack instead of one per block (the paper's code)."""
    implicit_iterations: int = 2
    """Fixed-point iterations of ``implicit_euler`` blocks."""
    history: LayerHistory = "none"
    """``"dlcl"``: a learned dense layer history around the blocks (any one-step method)."""
    positions: LMPositions = "learned"
    """``"learned"`` absolute positions (GPT / nanoGPT), ``"sinusoidal"``, or ``"relative"``
    representations in every self-attention."""
    max_relative_distance: int = 8
    """Relative positions: distances are clipped to ``[−k, k]``."""
    block_size: int = 256
    """Context length: the longest sequence the model reads (the position table's length)."""
    dropout: float = 0.0
    """Dropout on embeddings and sublayer outputs."""
    attention_dropout: float = 0.0
    """Dropout on attention weights."""
    activation: Activation = "gelu"
    """The feed-forward activation."""
    bias: bool = True
    """Biases in the projections and layer norms of the fields and in the final norm
    (``False``: none, as nanoGPT's ``bias=False``; RK2 gates and layer-history norms keep
    theirs)."""
    tie_embeddings: bool = True
    """Tie the output projection to the token embedding."""
    scaled_residual_init: bool = False
    """GPT-2's (and nanoGPT's) initialisation of the projections that write into the residual
    stream (attention output and the second feed-forward layer): ``N(0, 0.02 / sqrt(2 ·
    layers))``; ``False`` (default): ``N(0, 0.02)`` like every other matrix."""
    norm_eps: float = 1e-5
    """Epsilon of every layer norm."""
    field_convention: FieldConvention = "textbook"
    """``"textbook"`` ``F = Layer − id`` or the paper code's ``"layer"``."""
    stage_norm: bool = False
    """Layer-normalise every stage's output (what ``"layer"`` needs)."""

    def __post_init__(self) -> None:
        check_types(self)
        for key in ("vocab_size", "d_model", "num_heads", "ffn_dim", "block_size"):
            check(
                getattr(self, key) >= 1,
                f"CausalLMConfig.{key} must be >= 1, got {getattr(self, key)}",
            )
        check_layers("CausalLMConfig.layers", self.layers)
        check(
            self.d_model % self.num_heads == 0,
            f"CausalLMConfig.d_model ({self.d_model}) must be divisible by num_heads "
            f"({self.num_heads})",
        )
        for key in ("dropout", "attention_dropout"):
            check(
                0.0 <= getattr(self, key) < 1.0,
                f"CausalLMConfig.{key} must lie in [0, 1), got {getattr(self, key)}",
            )
        check(
            self.method != "continuous",
            "CausalLMConfig.method = 'continuous' is not supported yet for language models; "
            f"choose one of {sorted(STACK_METHODS)}",
        )
        check(
            self.method in STACK_METHODS,
            f"CausalLMConfig.method = {self.method!r} is not a known method"
            f"{suggest(self.method, STACK_METHODS)}; choose one of {sorted(STACK_METHODS)}",
        )
        problem = coefficient_problem(self.method, self.coefficients)
        check(not problem, f"CausalLMConfig.coefficients = {self.coefficients!r}: {problem}")
        problem = history_problem(self.method, self.history)
        check(not problem, f"CausalLMConfig.history = {self.history!r}: {problem}")
        check(
            self.max_relative_distance >= 1,
            f"CausalLMConfig.max_relative_distance must be >= 1, got {self.max_relative_distance}",
        )
        check(
            self.implicit_iterations >= 0,
            f"CausalLMConfig.implicit_iterations must be >= 0, got {self.implicit_iterations}",
        )
        check(self.norm_eps > 0, f"CausalLMConfig.norm_eps must be > 0, got {self.norm_eps}")

    @property
    def field_spec(self) -> FieldSpec:
        """What every causal field of the stack is built from."""
        return FieldSpec(
            self.d_model,
            self.num_heads,
            self.ffn_dim,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            activation=self.activation,
            convention=self.field_convention,
            stage_norm=self.stage_norm,
            norm_eps=self.norm_eps,
            max_relative_distance=(
                self.max_relative_distance if self.positions == "relative" else None
            ),
            bias=self.bias,
        )

    @property
    def stack_options(self) -> StackOptions:
        """The options of the stack (``build_stack(method, …, **asdict(options))``)."""
        return StackOptions(
            self.coefficients,
            self.d_model,
            self.share_gate,
            self.implicit_iterations,
            self.norm_eps,
            self.history,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CausalLMConfig:
        """Build from a mapping (e.g. YAML); unknown keys are errors naming the closest key."""
        return from_dict(cls, data, where="model")

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


class CausalLM(nn.Module):
    """Decoder-only Transformer whose stack is an ODE integrator (see module docstring).

    Example:
        >>> import torch
        >>> from odet.models import CausalLM, CausalLMConfig
        >>> lm = CausalLM(CausalLMConfig(vocab_size=65, d_model=32, num_heads=4, ffn_dim=64,
        ...                              layers=2, method="rk2", coefficients="gated",
        ...                              block_size=16)).eval()
        >>> lm(torch.randint(0, 65, (3, 10))).shape
        torch.Size([3, 10, 65])
    """

    def __init__(self, config: CausalLMConfig):
        super().__init__()
        self.config = c = config
        self.token_embed = nn.Embedding(c.vocab_size, c.d_model)
        self.positions: nn.Embedding | SinusoidalPositions | None = None
        if c.positions == "learned":
            self.positions = nn.Embedding(c.block_size, c.d_model)
        elif c.positions == "sinusoidal":
            self.positions = SinusoidalPositions(c.block_size, c.d_model)
        self.embed_dropout = Dropout(c.dropout)
        spec = c.field_spec
        self.stack = build_stack(
            c.method, lambda: CausalField(**asdict(spec)), c.layers, **asdict(c.stack_options)
        )
        self.norm = nn.LayerNorm(c.d_model, eps=c.norm_eps, bias=c.bias)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self._init_weights()
        self._compiled_step: Callable[..., Tensor] | None = None
        if c.tie_embeddings:
            self.head.weight = self.token_embed.weight

    def _init_weights(self) -> None:
        """GPT-2's: ``N(0, 0.02)`` projections and embeddings, zero biases, and the residual
        projections scaled down (``scaled_residual_init``)."""
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    nn.init.zeros_(module.bias)
        if self.config.scaled_residual_init:
            std = 0.02 / math.sqrt(2 * self.config.layers)
            for weight in self.residual_projections():
                nn.init.normal_(weight, std=std)

    def residual_projections(self) -> list[nn.Parameter]:
        """The weights of every field's attention output and second feed-forward layer."""
        fields = [m for m in self.stack.modules() if isinstance(m, CausalField)]
        return [w for f in fields for w in (f.self_attn.out_proj.weight, f.ffn.fc2.weight)]

    # ------------------------------------------------------------------ forward
    def init_state(self) -> DecoderState:
        """A fresh incremental-decoding state: one empty self-attention cache per (block,
        stage) and no encoder memory."""
        stages = self.stack.stage_counts
        return DecoderState(
            self_attn={(l, i): KVCache() for l, count in enumerate(stages) for i in range(count)},
            memory_kv={},
            memory_padding_mask=None,
            stage_counts=stages,
        )

    def decode(self, tokens: Tensor, state: DecoderState | None = None) -> Tensor:
        """Logits ``(B, T, V)`` of the next token at every position of ``tokens (B, T)``.

        Without ``state`` the whole sequence is read. With ``state`` ``tokens`` are the new
        positions after the ``state.length`` cached ones; they are appended to the caches and
        ``state.length`` advances. At most ``block_size`` positions in all.
        """
        offset = 0 if state is None else state.length
        self._check_tokens(tokens, offset)
        if state is not None:
            state.check_batch(tokens.shape[0])
        return self._decode(tokens, state)

    def _decode(self, tokens: Tensor, state: DecoderState | None, last: bool = False) -> Tensor:
        """``decode`` without the input checks; ``last``: logits ``(B, 1, V)`` of the last
        position only (what sampling reads)."""
        offset = 0 if state is None else state.length
        t = tokens.shape[1]
        x = self.token_embed(tokens)  # (B, T, D)
        if isinstance(self.positions, nn.Embedding):
            x = x + self.positions.weight[offset : offset + t]
        elif self.positions is not None:
            x = x + self.positions(t, offset).to(x.dtype)
        x = self.embed_dropout(x)
        if state is None:
            x = self.stack(x)
        else:
            x = self.stack(
                x,
                block_kwargs=[
                    {STAGE_CACHES: state.block_caches(l)} for l in range(len(self.stack.blocks))
                ],
            )
            state.length += t
        if last:
            x = x[:, -1:]
        return self.head(self.norm(x))

    def forward(self, tokens: Tensor) -> Tensor:
        """Causal logits ``(B, T, V)`` of ``tokens (B, T)``, ``T <= block_size``."""
        return self.decode(tokens)

    # ------------------------------------------------------------------ generation
    def generate(
        self,
        prompt_ids: Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        use_cache: bool = True,
        compile: bool = False,
    ) -> Tensor:
        """Sample ``max_new_tokens`` after ``prompt_ids (B, T0)``: ``(B, T0 + n)`` token ids.

        Each token is drawn from ``softmax(logits / temperature)`` restricted to the ``top_k``
        most likely tokens and to the smallest set whose probability reaches ``top_p``, with a
        ``torch.Generator`` seeded by ``seed`` (``None``: torch's global RNG). There is no greedy
        mode (``temperature`` must be > 0). The model reads at most the last ``block_size``
        tokens, as nanoGPT: a longer prompt is cropped, and once the sequence outgrows the
        context the cache is refilled from the last ``block_size`` tokens at every step.
        ``use_cache=False`` reads the whole (cropped) sequence at every step and samples the same
        tokens. ``compile=True`` (with the cache; not with relative positions) runs each one-token
        step through ``torch.compile`` over fixed-size caches (``StaticKVCache``): the first call
        per batch size compiles (seconds), later ones skip the per-op Python dispatch; the logits
        agree with the eager step to rounding, so the tokens are the same except where two
        tokens' probabilities tie to rounding.
        """
        if (
            isinstance(max_new_tokens, bool)
            or not isinstance(max_new_tokens, int)
            or (max_new_tokens < 0)
        ):
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        if not temperature > 0:
            raise ValueError(
                f"temperature must be > 0 (there is no greedy mode), got {temperature}"
            )
        if top_k is not None and (
            isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1
        ):
            raise ValueError(f"top_k must be an integer >= 1 (or None), got {top_k!r}")
        if seed is not None:
            check_generator_seed(seed)
        check_flag("use_cache", use_cache)
        check_flag("compile", compile)
        if top_p is not None and not 0 < top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1] (or None), got {top_p}")
        if not isinstance(prompt_ids, Tensor):
            raise TypeError(f"prompt_ids must be a torch.Tensor, got {type(prompt_ids).__name__}")
        if compile and self.config.positions == "relative":
            raise ValueError("generate(compile=True) does not support relative positions yet")
        self._check_tokens(prompt_ids, 0, crop=True)
        if prompt_ids.shape[-1] + max_new_tokens > INT_MAX:
            raise ValueError(
                f"max_new_tokens={max_new_tokens} with a prompt of {prompt_ids.shape[-1]} tokens "
                f"exceeds the longest sequence a tensor can hold ({INT_MAX} tokens)"
            )
        generator = None
        if seed is not None:
            generator = torch.Generator(device=prompt_ids.device).manual_seed(seed)
        sampling = Sampling(
            temperature=temperature,
            top_k=top_k or 0,
            top_p=1.0 if top_p is None else top_p,
            generator=generator,
        )
        # The compiled step is traced and guarded under no_grad; eager sampling needs no views
        # or version counters at all.
        with torch.no_grad() if compile else torch.inference_mode():
            out = self._sample(prompt_ids, max_new_tokens, sampling, use_cache, compile)
        return out.clone()  # an ordinary tensor, usable outside inference mode

    def _sample(
        self,
        prompt_ids: Tensor,
        max_new_tokens: int,
        sampling: Sampling,
        use_cache: bool,
        compile: bool,
    ) -> Tensor:
        """The sampling loop of ``generate`` (arguments checked there): ``(B, T0 + n)``."""
        block_size = self.config.block_size
        b, t0 = prompt_ids.shape
        out = prompt_ids.new_empty(b, t0 + max_new_tokens)
        out[:, :t0] = prompt_ids
        state: DecoderState | None = None
        static: StaticState | None = None
        needed = min(t0, block_size) + max_new_tokens
        capacity = min(block_size, -(-needed // STATIC_QUANTUM) * STATIC_QUANTUM)
        for t in range(t0, t0 + max_new_tokens):
            if not use_cache:
                logits = self._decode(out[:, max(0, t - block_size) : t], None, last=True)
            elif state is None or state.length >= block_size:
                state = self.init_state()
                logits = self._decode(out[:, max(0, t - block_size) : t], state, last=True)
                static = None
                if compile and state.length < capacity:
                    static = StaticState.of(state, capacity)
            elif static is not None:
                logits = self.compiled_step()(out[:, t - 1 : t], static.position, static.caches)
                static.position += 1
                state.length += 1
            else:
                logits = self._decode(out[:, t - 1 : t], state, last=True)
            logits = logits[:, -1].to(torch.promote_types(logits.dtype, torch.float32))
            logits = sampling.truncate(sampling.temper(logits))  # (B, V)
            token = torch.multinomial(logits.softmax(-1), 1, generator=sampling.generator)
            out[:, t : t + 1] = token  # (B, 1)
        return out

    def static_step(
        self, tokens: Tensor, position: Tensor, caches: list[list[StaticKVCache]]
    ) -> Tensor:
        """Logits ``(B, 1, V)`` after ``tokens (B, 1)`` at ``position`` (a 0-dim long tensor),
        whose keys/values are written into ``caches[block][stage]``: the decoding step whose
        shapes do not depend on the position, so ``compiled_step`` compiles it once per batch
        size and cache capacity."""
        x = self.token_embed(tokens)  # (B, 1, D)
        if isinstance(self.positions, nn.Embedding):
            x = x + self.positions.weight.index_select(0, position.view(1))
        elif isinstance(self.positions, SinusoidalPositions):
            x = x + self.positions.table.index_select(0, position.view(1)).to(x.dtype)
        x = self.embed_dropout(x)
        x = self.stack(x, block_kwargs=[{STAGE_CACHES: stages} for stages in caches])
        return self.head(self.norm(x))

    def compiled_step(self) -> Callable[[Tensor, Tensor, list[list[StaticKVCache]]], Tensor]:
        """``static_step`` under ``torch.compile`` (built once per model, compiled per shape)."""
        if self._compiled_step is None:
            self._compiled_step = torch.compile(
                self.static_step,
                fullgraph=True,
                dynamic=False,
                options={"cpp_wrapper": True},  # a C++ caller of the kernels, not Python
            )
        return self._compiled_step

    # ------------------------------------------------------------------ checkpoints
    def save_pretrained(self, path: str | Path) -> Path:
        """Write ``config.json`` and ``model.safetensors`` to directory ``path``."""
        return save_model_dir(self, self.config.to_dict(), path, model_type="causal_lm")

    @classmethod
    def from_pretrained(
        cls, path: str | Path, map_location: str | torch.device = "cpu"
    ) -> CausalLM:
        """Load a model written by ``save_pretrained`` (no pickle: JSON + safetensors)."""
        return load_model_dir(
            path,
            model_type="causal_lm",
            build=lambda data: cls(CausalLMConfig.from_dict(data)),
            map_location=map_location,
        )

    def num_parameters(self) -> int:
        """Distinct trainable parameters (the tied embedding and shared gates counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    # ------------------------------------------------------------------ input checks
    def _check_tokens(self, tokens: Tensor, offset: int, *, crop: bool = False) -> None:
        """Type, shape, length and ids of ``tokens`` after ``offset`` cached positions; with
        ``crop`` (a prompt) the length is not limited: the model reads the last block_size."""
        if not isinstance(tokens, Tensor):
            raise TypeError(f"tokens must be a torch.Tensor of ids, got {type(tokens).__name__}")
        if tokens.dtype not in (torch.int64, torch.int32):
            raise TypeError(
                f"tokens must be an integer tensor of ids (torch.long), got {tokens.dtype}"
            )
        if tokens.dim() != 2 or tokens.numel() == 0:
            raise ValueError(
                f"tokens must have shape (batch, length > 0), got {tuple(tokens.shape)}"
            )
        if not crop and offset + tokens.shape[1] > self.config.block_size:
            raise ValueError(
                f"{offset + tokens.shape[1]} positions exceed the model's block_size="
                f"{self.config.block_size}; crop the input to the last block_size tokens"
            )
        if torch.compiler.is_compiling():
            return  # the id range check reads values (a graph break); eager calls still check
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= self.config.vocab_size:
            bad = low if low < 0 else high
            raise ValueError(
                f"tokens contain id {bad} outside the vocabulary [0, {self.config.vocab_size})"
            )
