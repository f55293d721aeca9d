"""The systems under test: odet variants and the peers, built at identical sizes.

Peers (random init, never downloaded):

- ``hf-marian``: Hugging Face ``MarianMTModel`` from a ``MarianConfig`` of the same size (D, heads,
  FFN, layers, vocabulary, shared embeddings and tied output, ReLU, √D-scaled embeddings,
  sinusoidal positions, dropout 0.1 after attention/FFN, none inside), SDPA attention. Differences
  that remain are Marian's own design: post-norm layers (odet is pre-norm, with one final layer
  norm per stack) and a ``final_logits_bias`` buffer.
- ``torch-transformer``: ``torch.nn.Transformer(norm_first=True)`` with the same embeddings,
  positions and tied output projection around it.
- ``odet-euler-int8`` (generation only): ``odet generate --precision int8``, the model copy of
  ``odet.inference.inference_model`` (int8 weights, per-row int8 activations,
  ``odet.nn.quantization``); ``odet-euler-int8-qdyn``: the ablation with PyTorch's
  ``torch.ao.quantization.quantize_dynamic`` on the same layers (one activation scale per
  tensor).
- ``odet-euler-onednn`` (generation only): ``odet generate --gemm onednn``, fp32 with the
  attention, FFN and output-projection linears through oneDNN's packed GEMMs
  (``odet.nn.onednn``); ``odet-dec-rk2-onednn`` / ``odet-dec-rk4-onednn`` the same for RK
  decoders; ``odet-dec-euler2x-onednn`` / ``odet-dec-euler4x-onednn`` Euler decoders of 2× / 4×
  the layers, the same layer evaluations and self-attention caches per step as the RK2 / RK4
  decoders (the per-stage overhead of an RK decoder is its time over theirs).
- ``ct2-marian`` / ``ct2-marian-int8`` (generation only): that HF Marian converted to
  CTranslate2 (``ctranslate2``, the optional ``bench`` extra) with its own Marian loader over a
  synthetic vocabulary, decoded by ``ctranslate2.Translator`` in ``float32`` / ``int8``, in a
  child process of its own (:class:`ChildProcessGenerate`): with more than one thread, a
  CTranslate2 translator that has run in the process slows every torch system decoding after
  it (``benchmarks/RESULTS.md``, "CTranslate2 in its own process").

Every system is trained with the same loss (token cross-entropy, padding ignored) and torch's
fused ``torch.optim.Adam`` (what ``odet train`` uses, and HF's Trainer by default).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import math
import multiprocessing
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from odet.generation import DecodePrecision, Gemm
from odet.inference import INT8_ALSO, inference_model
from odet.models import Seq2Seq, Seq2SeqConfig
from odet.nn import sinusoidal_table
from odet.nn.dropout import Dropout
from odet.nn.precision import autocast_bf16
from odet.nn.quantization import linear_layer_names
from odet.training.compile import compile_step

PAD, UNK, BOS, EOS = 0, 1, 2, 3
DROPOUT = 0.1


class PeerUnavailableError(RuntimeError):
    """A peer library is not installed; the runner records the reason and goes on."""


@dataclass(frozen=True)
class BenchSize:
    """One model size and its workloads.

    Training: ``batch_size`` sentences of exactly ``src_len`` source and ``tgt_len`` target
    tokens. Generation: ``gen_batch`` sources of ``src_len`` tokens, each decoded to exactly
    ``gen_tokens`` tokens (EOS banned before, forced after).
    """

    name: str
    vocab_size: int
    d_model: int
    num_heads: int
    ffn_dim: int
    encoder_layers: int
    decoder_layers: int
    batch_size: int
    src_len: int
    tgt_len: int
    gen_batch: int
    gen_tokens: int

    def __post_init__(self) -> None:
        for key, value in vars(self).items():
            if key != "name" and (not isinstance(value, int) or value < 1):
                raise ValueError(f"BenchSize.{key} must be a positive integer, got {value!r}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"BenchSize.d_model ({self.d_model}) must be divisible by num_heads "
                f"({self.num_heads})"
            )

    @property
    def train_tokens(self) -> int:
        """Source + target tokens per training step."""
        return self.batch_size * (self.src_len + self.tgt_len)


SIZES: dict[str, BenchSize] = {
    "toy": BenchSize("toy", 1000, 64, 4, 128, 2, 2, 16, 8, 8, 8, 6),
    "d256": BenchSize("d256", 10_000, 256, 4, 1024, 3, 3, 128, 16, 16, 64, 20),
    "d512": BenchSize("d512", 10_000, 512, 8, 2048, 6, 6, 128, 16, 16, 64, 20),
}


@dataclass(frozen=True)
class Batch:
    """``src (B, S)``, ``tgt_in (B, T)`` starting with BOS, ``tgt_out (B, T)`` = shifted target."""

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor


def make_batch(size: BenchSize, seed: int = 0) -> Batch:
    """Random non-special tokens: no padding, so every system does the same work."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(4, size.vocab_size, (size.batch_size, size.src_len), generator=gen)
    tgt = torch.randint(4, size.vocab_size, (size.batch_size, size.tgt_len), generator=gen)
    tgt_in = torch.cat([torch.full_like(tgt[:, :1], BOS), tgt[:, :-1]], dim=1)
    return Batch(src, tgt_in, tgt)


def token_loss(logits: Tensor, target: Tensor) -> Tensor:
    """Mean cross-entropy of ``logits (B, T, V)`` against ``target (B, T)``, padding ignored."""
    return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=PAD)


Forward = Callable[[Batch], Tensor]


@dataclass
class TrainSystem:
    """A model, its forward-to-logits function and the precision context of its steps."""

    model: nn.Module
    forward: Forward
    precision: Callable[[], AbstractContextManager[Any]] = nullcontext

    def __post_init__(self) -> None:
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4, fused=True)

    eager_forward: Forward | None = None
    """The same computation without compilation, for FLOP counting (``None``: ``forward``)."""
    compiled_loss: Callable[[Batch], Tensor] | None = None
    """Forward and loss compiled together, as ``train.compile`` does (``None``: eager loss)."""

    def loss(self, batch: Batch, *, eager: bool = False) -> Tensor:
        forward = self.eager_forward if eager and self.eager_forward else self.forward
        with self.precision():
            if self.compiled_loss is not None and not eager:
                return self.compiled_loss(batch)
            return token_loss(forward(batch), batch.tgt_out)

    def step(self, batch: Batch) -> float:
        """One forward + backward + Adam step; returns the loss."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(batch)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())


class MasterWeightsSystem(TrainSystem):
    """bf16 weights and activations for compute, fp32 master copies updated by Adam.

    The alternative to autocast measured by the runner: no per-step weight casts, but two weight
    copies and a bf16 → fp32 gradient copy per step.
    """

    def __post_init__(self) -> None:
        self.model.to(torch.bfloat16)
        self.params = list(self.model.parameters())
        self.masters = [p.detach().float().clone().requires_grad_() for p in self.params]
        self.optimizer = torch.optim.Adam(self.masters, lr=1e-4, fused=True)

    def step(self, batch: Batch) -> float:
        self.model.zero_grad(set_to_none=True)
        loss = self.loss(batch)
        loss.backward()
        with torch.no_grad():
            for master, p in zip(self.masters, self.params, strict=True):
                master.grad = None if p.grad is None else p.grad.float()
            self.optimizer.step()
            for master, p in zip(self.masters, self.params, strict=True):
                p.copy_(master)
        return float(loss.detach())


# ----------------------------------------------------------------------------------- odet
def odet_config(
    size: BenchSize,
    encoder_method: str = "euler",
    coefficients: str = "fixed",
    depth: int = 1,
    positions: str = "sinusoidal",
):
    """The odet model of ``size`` (``depth`` × its encoder layers): shared embeddings, dropout
    0.1 after attention/FFN; ``positions`` as ``Seq2SeqConfig.positions`` (clipping at 8)."""
    return Seq2SeqConfig(
        positions=positions,
        vocab_size=size.vocab_size,
        d_model=size.d_model,
        num_heads=size.num_heads,
        ffn_dim=size.ffn_dim,
        encoder_layers=depth * size.encoder_layers,
        decoder_layers=size.decoder_layers,
        encoder_method=encoder_method,
        coefficients=coefficients,
        dropout=DROPOUT,
        share_all_embeddings=True,
        max_positions=256,
        pad_id=PAD,
        unk_id=UNK,
        bos_id=BOS,
        eos_id=EOS,
    )


def odet_model(
    size: BenchSize,
    encoder_method: str = "euler",
    coefficients: str = "fixed",
    depth: int = 1,
    positions: str = "sinusoidal",
):
    torch.manual_seed(0)
    return Seq2Seq(odet_config(size, encoder_method, coefficients, depth, positions))


def _odet_train(
    method: str,
    coefficients: str = "fixed",
    bf16: bool = False,
    checkpointing: bool = False,
    positions: str = "sinusoidal",
):
    def build(size: BenchSize) -> TrainSystem:
        model = odet_model(size, method, coefficients, positions=positions).train()
        model.set_activation_checkpointing(checkpointing)
        return TrainSystem(
            model,
            lambda b: model(b.src, b.tgt_in),
            autocast_bf16 if bf16 else nullcontext,
        )

    return build


def _odet_torch_dropout(size: BenchSize) -> TrainSystem:
    """Ablation: odet Euler with ``nn.Dropout`` (``bernoulli_``) instead of odet's ``Dropout``."""
    system = _odet_train("euler")(size)
    for module in list(system.model.modules()):
        for name, child in module.named_children():
            if isinstance(child, Dropout):
                setattr(module, name, nn.Dropout(child.p))
    return system


def _odet_bf16_default_sdpa(size: BenchSize) -> TrainSystem:
    """Ablation: bf16 autocast leaving SDPA's backend choice to torch (fused CPU kernel)."""
    model = odet_model(size).train()
    return TrainSystem(
        model, lambda b: model(b.src, b.tgt_in), lambda: torch.autocast("cpu", torch.bfloat16)
    )


def _bf16_scores_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """Attention as two autocast matmuls around an fp32 softmax: the scores come out of a bf16
    GEMM (rounded to bf16), the probabilities go into the second one as bf16. The math SDPA
    backend instead upcasts q, k, v to fp32 on CPU."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.matmul(q * scale, k.transpose(-1, -2))
    if is_causal:  # top-left aligned, as SDPA's
        attn_mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = F.dropout(
        scores.softmax(dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)), dropout_p
    )
    return torch.matmul(weights.to(v.dtype), v)


@contextmanager
def _autocast_bf16_scores() -> Iterator[None]:
    with (
        autocast_bf16(),
        mock.patch.object(F, "scaled_dot_product_attention", _bf16_scores_attention),
    ):
        yield


def _odet_bf16_scores(size: BenchSize) -> TrainSystem:
    """Ablation: bf16 autocast with attention as two bf16 matmuls around an fp32 softmax (the
    scores and probabilities rounded to bf16) instead of the math SDPA backend's fp32 upcast."""
    model = odet_model(size).train()
    return TrainSystem(model, lambda b: model(b.src, b.tgt_in), _autocast_bf16_scores)


def _odet_compiled(size: BenchSize) -> TrainSystem:
    """Ablation: odet Euler under ``torch.compile`` (default mode; the runner's untimed warm-up
    round pays the compilation). FLOPs are counted on the eager model, which does the same
    work."""
    model = odet_model(size).train()
    compiled = torch.compile(model)
    return TrainSystem(
        model,
        lambda b: compiled(b.src, b.tgt_in),
        eager_forward=lambda b: model(b.src, b.tgt_in),
    )


def _odet_compiled_step(bf16: bool) -> Callable[[BenchSize], TrainSystem]:
    """odet Euler with ``train.compile``'s ``compile_step``: the forward pass and the loss in one
    compiled graph with symbolic sizes, as the translation trainer compiles it (its backward
    through AOTAutograd); the first step pays the compilation."""

    def build(size: BenchSize) -> TrainSystem:
        model = odet_model(size).train()
        compiled = compile_step(_forward_token_loss, dynamic=True)
        return TrainSystem(
            model,
            lambda b: model(b.src, b.tgt_in),
            autocast_bf16 if bf16 else nullcontext,
            compiled_loss=lambda b: compiled(model, b.src, b.tgt_in, b.tgt_out),
        )

    return build


def _forward_token_loss(model: nn.Module, src: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> Tensor:
    return token_loss(model(src, tgt_in), tgt_out)


def _odet_bf16_weights(size: BenchSize) -> TrainSystem:
    model = odet_model(size).train()
    return MasterWeightsSystem(model, lambda b: model(b.src, b.tgt_in))


# ----------------------------------------------------------------------------------- peers
def marian_model(size: BenchSize) -> nn.Module:
    """HF ``MarianMTModel`` of ``size`` (random init; raises PeerUnavailableError without HF)."""
    try:
        from transformers import MarianConfig, MarianMTModel
    except ImportError as err:
        raise PeerUnavailableError(f"transformers is not installed ({err})") from err
    config = MarianConfig(
        vocab_size=size.vocab_size,
        d_model=size.d_model,
        encoder_layers=size.encoder_layers,
        decoder_layers=size.decoder_layers,
        encoder_attention_heads=size.num_heads,
        decoder_attention_heads=size.num_heads,
        encoder_ffn_dim=size.ffn_dim,
        decoder_ffn_dim=size.ffn_dim,
        activation_function="relu",
        dropout=DROPOUT,
        attention_dropout=0.0,
        activation_dropout=0.0,
        max_position_embeddings=256,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=BOS,
        forced_eos_token_id=None,
        decoder_start_token_id=BOS,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return MarianMTModel(config)


def _marian_train(size: BenchSize) -> TrainSystem:
    model = marian_model(size).train()

    def forward(b: Batch) -> Tensor:
        return model(
            input_ids=b.src,
            attention_mask=b.src.ne(PAD),
            decoder_input_ids=b.tgt_in,
            use_cache=False,
        ).logits

    return TrainSystem(model, forward)


class TorchTransformer(nn.Module):
    """``torch.nn.Transformer(norm_first=True)`` with √D-scaled shared embeddings, sinusoidal
    positions and a tied output projection: ``(B, S), (B, T) -> (B, T, V)``."""

    def __init__(self, size: BenchSize):
        super().__init__()
        d = size.d_model
        self.embed = nn.Embedding(size.vocab_size, d, padding_idx=PAD)
        nn.init.normal_(self.embed.weight, std=d**-0.5)
        self.scale = math.sqrt(d)
        self.register_buffer("positions", sinusoidal_table(256, d), persistent=False)
        layer = nn.TransformerEncoderLayer(
            d, size.num_heads, size.ffn_dim, DROPOUT, batch_first=True, norm_first=True
        )
        encoder = nn.TransformerEncoder(
            layer, size.encoder_layers, nn.LayerNorm(d), enable_nested_tensor=False
        )  # nested tensors do not apply to norm_first layers; saying so avoids a warning
        self.transformer = nn.Transformer(
            d,
            size.num_heads,
            size.encoder_layers,
            size.decoder_layers,
            size.ffn_dim,
            dropout=DROPOUT,
            custom_encoder=encoder,
            batch_first=True,
            norm_first=True,
        )
        self.project = nn.Linear(d, size.vocab_size, bias=False)
        self.project.weight = self.embed.weight

    def _embed(self, tokens: Tensor) -> Tensor:
        return self.embed(tokens) * self.scale + self.positions[: tokens.shape[1]]

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1])
        hidden = self.transformer(
            self._embed(src),
            self._embed(tgt_in),
            tgt_mask=causal,
            src_key_padding_mask=src.eq(PAD),
            memory_key_padding_mask=src.eq(PAD),
            tgt_is_causal=True,
        )
        return self.project(hidden)


def _torch_train(size: BenchSize) -> TrainSystem:
    torch.manual_seed(0)
    model = TorchTransformer(size).train()
    return TrainSystem(model, lambda b: model(b.src, b.tgt_in))


TRAIN_SYSTEMS: dict[str, Callable[[BenchSize], TrainSystem]] = {
    "odet-euler": _odet_train("euler"),
    "odet-rk2": _odet_train("rk2"),
    "odet-rk2-gated": _odet_train("rk2", "gated"),
    "odet-rk4": _odet_train("rk4"),
    "odet-rk4-ckpt": _odet_train("rk4", checkpointing=True),
    "odet-euler-bf16": _odet_train("euler", bf16=True),
    "odet-euler-bf16-fused-sdpa": _odet_bf16_default_sdpa,
    "odet-euler-bf16-scores": _odet_bf16_scores,
    "odet-euler-bf16-weights": _odet_bf16_weights,
    "odet-euler-nn-dropout": _odet_torch_dropout,
    "odet-euler-compiled": _odet_compiled,
    "odet-euler-compiled-step": _odet_compiled_step(bf16=False),
    "odet-euler-bf16-compiled-step": _odet_compiled_step(bf16=True),
    "odet-euler-rpr": _odet_train("euler", positions="both"),
    "odet-euler-rpr-bf16": _odet_train("euler", bf16=True, positions="both"),
    "hf-marian": _marian_train,
    "torch-transformer": _torch_train,
}
"""Training systems by name; the first odet entry is the Euler baseline of the RK ratios."""


# ------------------------------------------------------------------- encoder-only (methods)
@dataclass(frozen=True)
class Encoder:
    """An encoder variant: block method, coefficient scheme, depth in multiples of the size's."""

    method: str
    coefficients: str = "fixed"
    depth: int = 1


ENCODERS: dict[str, Encoder] = {
    "euler": Encoder("euler"),
    "euler-2x": Encoder("euler", depth=2),
    "rk2": Encoder("rk2"),
    "rk2-gated": Encoder("rk2", "gated"),
    "rk4": Encoder("rk4"),
    "ab2": Encoder("ab2"),
    "ab3": Encoder("ab3"),
    "dlcl": Encoder("dlcl"),
    "pc": Encoder("pc", "ema"),
    "implicit_euler": Encoder("implicit_euler"),
}
"""Encoder-only cost ratios are taken against the first entry."""


def encoder_task(size: BenchSize, name: str) -> Callable[[Batch], None]:
    """Forward + backward of the odet encoder ``ENCODERS[name]`` alone, for cost ratios."""
    e = ENCODERS[name]
    model = odet_model(size, e.method, e.coefficients, e.depth).train()

    def run(batch: Batch) -> None:
        model.zero_grad(set_to_none=True)
        model.encode(batch.src).memory.square().mean().backward()

    return run


# ------------------------------------------------------------------------------ generation
Generate = Callable[[Tensor, int], list[list[int]]]
"""``(src (B, S), beam_size) -> B token lists``, each exactly ``gen_tokens`` long."""


def quantize_dynamic_copy(model: Seq2Seq, also: tuple[str, ...] = INT8_ALSO) -> Seq2Seq:
    """Ablation of ``precision="int8"``: the same layers through PyTorch's
    ``torch.ao.quantization.quantize_dynamic`` (int8 weights, one activation scale per input
    tensor, so outputs depend on the batch and on the cached / uncached path)."""
    from torch.ao.quantization import quantize_dynamic

    names = set(linear_layer_names(model, also))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantize_per_tensor", category=UserWarning)
        return quantize_dynamic(copy.deepcopy(model).eval(), names, dtype=torch.qint8)


def generate_config(
    size: BenchSize, method: str, decoder_method: str = "euler", decoder_depth: int = 1
) -> Seq2SeqConfig:
    """The model a generation system decodes with (``decoder_depth`` × the decoder layers)."""
    return dataclasses.replace(
        odet_config(size, method),
        decoder_method=decoder_method,
        decoder_layers=decoder_depth * size.decoder_layers,
    )


def _odet_generate(
    method: str,
    preallocate: bool = True,
    dtype: torch.dtype = torch.float32,
    int8: str | None = None,
    compile: bool = False,
    decoder_method: str = "euler",
    gemm: Gemm = "torch",
    decoder_depth: int = 1,
    precision: DecodePrecision = "fp32",
) -> Callable[[BenchSize], Generate]:
    def build(size: BenchSize) -> Generate:
        torch.manual_seed(0)
        config = generate_config(size, method, decoder_method, decoder_depth)
        model = Seq2Seq(config).eval().to(dtype)
        if int8 == "odet":
            model = inference_model(model, "int8")
        elif int8 == "qdyn":
            model = quantize_dynamic_copy(model)
        model = inference_model(model, precision, gemm)
        if not preallocate:  # ablation: the concatenating KV cache
            init_state = model.init_state

            def concatenating_state(encoder_out: Any) -> Any:
                state = init_state(encoder_out)
                for cache in state.self_attn.values():
                    cache.preallocate = False
                return state

            model.init_state = concatenating_state  # type: ignore[method-assign]

        def run(src: Tensor, beam: int) -> list[list[int]]:
            n = size.gen_tokens
            return model.generate(src, beam_size=beam, max_len=n, min_len=n, compile=compile)

        return run

    return build


def _marian_generate(size: BenchSize, dtype: torch.dtype = torch.float32) -> Generate:
    from transformers import GenerationConfig

    model = marian_model(size).eval().to(dtype)

    def run(src: Tensor, beam: int) -> list[list[int]]:
        # odet decodes n tokens then a forced EOS: n + 1 decoder calls. HF gets n + 1 tokens
        # with EOS banned throughout: the same n + 1 decoder calls.
        n = size.gen_tokens + 1
        config = GenerationConfig(
            num_beams=beam,
            do_sample=False,
            min_new_tokens=n,
            max_new_tokens=n,
            length_penalty=1.0,
            early_stopping=False,
            use_cache=True,
            pad_token_id=PAD,
            eos_token_id=EOS,
            bos_token_id=BOS,
            decoder_start_token_id=BOS,
        )
        with torch.no_grad():
            out = model.generate(
                input_ids=src, attention_mask=src.ne(PAD), generation_config=config
            )
        return [row[1:-1] for row in out.tolist()]

    return run


class _SyntheticVocabulary:
    """Stand-in for a Marian tokenizer: what CTranslate2's Marian loader reads of one."""

    eos_token = "</s>"
    unk_token = "<unk>"
    bos_token = "<s>"

    def __init__(self, tokens: list[str]):
        self.tokens = tokens

    def get_vocab(self) -> dict[str, int]:
        return {token: i for i, token in enumerate(self.tokens)}


def ct2_vocabulary(size: BenchSize) -> list[str]:
    """One name per Marian id: the specials at PAD/UNK/BOS/EOS, ``t<i>`` for the rest, and
    ``<pad>`` last — the row CTranslate2's Marian loader drops (Marian keeps its pad there)."""
    names = {PAD: "<blank>", UNK: "<unk>", BOS: "<s>", EOS: "</s>"}
    tokens = [names.get(i, f"t{i}") for i in range(size.vocab_size)]
    tokens[-1] = "<pad>"
    return tokens


_CT2_MODELS: dict[str, dict[str, bytes]] = {}
"""Converted model files per size, in memory (converted once, loaded per compute type)."""


def ct2_model_files(size: BenchSize) -> dict[str, bytes]:
    """``marian_model(size)`` converted to CTranslate2 (fp32 weights), as in-memory files."""
    if size.name in _CT2_MODELS:
        return _CT2_MODELS[size.name]
    try:
        from ctranslate2.converters.transformers import MarianMTLoader
    except ImportError as err:
        raise PeerUnavailableError(f"ctranslate2 is not installed ({err})") from err
    model = marian_model(size).eval()
    spec = MarianMTLoader()(model, _SyntheticVocabulary(ct2_vocabulary(size)))
    spec.validate()
    spec.optimize(quantization=None)
    folder = Path(tempfile.mkdtemp(prefix="odet-ct2-"))
    try:
        spec.save(str(folder))
        files = {path.name: path.read_bytes() for path in folder.iterdir()}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    _CT2_MODELS[size.name] = files
    return files


def ct2_translator(size: BenchSize, compute_type: str = "float32", threads: int | None = None):
    """A ``ctranslate2.Translator`` of ``size`` on CPU: ``intra_threads`` = ``threads``
    (default: torch's thread count, as the other systems use), ``inter_threads`` = 1."""
    files = ct2_model_files(size)
    import ctranslate2

    return ctranslate2.Translator(
        f"odet-bench-{size.name}",
        device="cpu",
        compute_type=compute_type,
        intra_threads=threads or torch.get_num_threads(),
        inter_threads=1,
        files=files,
    )


KEEP_FREED_MEMORY_IN_CHILDREN = False
"""Whether child-process systems run under ``odet.runtime.keep_freed_memory`` (the runner sets
it with ``--keep-freed-memory``, so that every system shares the parent's allocator setting)."""


class ChildProcessGenerate:
    """A generation system built and run in a spawned child process; calls are forwarded.

    The child gets the parent's torch thread count (and allocator setting); it is idle, blocked
    on its pipe, while other systems run. The caller's time of a call includes one round trip
    of the sources and the token ids through the pipe (well under a millisecond here).
    """

    def __init__(self, compute_type: str, size: BenchSize):
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_serve_ct2,
            args=(
                child,
                compute_type,
                size,
                torch.get_num_threads(),
                KEEP_FREED_MEMORY_IN_CHILDREN,
            ),
            daemon=True,
        )
        self._process.start()
        child.close()
        kind, message = self._receive()
        if kind != "ready":
            self.close()
            raise (PeerUnavailableError if kind == "unavailable" else RuntimeError)(message)

    def _receive(self) -> tuple[str, Any]:
        try:
            return self._conn.recv()
        except EOFError:
            code = self._process.exitcode
            return "error", f"the child process of a benchmark system ended (exit code {code})"

    def __call__(self, src: Tensor, beam: int) -> list[list[int]]:
        self._conn.send((src.tolist(), beam))
        kind, value = self._receive()
        if kind != "ok":
            raise RuntimeError(value)
        return value

    def close(self) -> None:
        self._conn.close()
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()

    def __del__(self) -> None:
        if getattr(self, "_process", None) is not None and self._process.is_alive():
            self.close()


def _serve_ct2(conn: Any, compute_type: str, size: BenchSize, threads: int, keep: bool) -> None:
    """The child of :class:`ChildProcessGenerate`: build, say "ready", then answer calls."""
    torch.set_num_threads(threads)
    if keep:
        from odet.runtime import keep_freed_memory

        keep_freed_memory()
    try:
        run = _ct2_in_process(compute_type)(size)
    except PeerUnavailableError as err:
        conn.send(("unavailable", str(err)))
        return
    except Exception as err:  # reported in the parent, which owns the run
        conn.send(("error", f"{type(err).__name__}: {err}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            rows, beam = conn.recv()
        except EOFError:
            return
        try:
            conn.send(("ok", run(torch.tensor(rows), beam)))
        except Exception as err:
            conn.send(("error", f"{type(err).__name__}: {err}"))


def _ct2_generate(compute_type: str) -> Callable[[BenchSize], Generate]:
    """CTranslate2 in ``compute_type``, decoded in a child process (module docstring)."""

    def build(size: BenchSize) -> Generate:
        try:
            importlib.import_module("ctranslate2")
        except ImportError as err:
            raise PeerUnavailableError(f"ctranslate2 is not installed ({err})") from err
        return ChildProcessGenerate(compute_type, size)

    return build


def _ct2_in_process(compute_type: str) -> Callable[[BenchSize], Generate]:
    def build(size: BenchSize) -> Generate:
        translator = ct2_translator(size, compute_type)
        vocab = ct2_vocabulary(size)
        ids = {token: i for i, token in enumerate(vocab)}

        def run(src: Tensor, beam: int) -> list[list[int]]:
            # As for HF: n + 1 tokens with EOS banned throughout (min = max decoding length),
            # the same n + 1 decoder calls as odet's n tokens and forced EOS. Source id V - 1
            # (the dropped <pad> row) reaches CTranslate2 as <unk>: the same work.
            n = size.gen_tokens + 1
            source = [[vocab[i] for i in row] for row in src.tolist()]
            results = translator.translate_batch(
                source,
                beam_size=beam,
                num_hypotheses=1,
                length_penalty=1.0,
                min_decoding_length=n,
                max_decoding_length=n,
                max_batch_size=0,
            )
            out = [[ids[t] for t in r.hypotheses[0]] for r in results]
            if {len(tokens) for tokens in out} != {n}:
                raise RuntimeError(
                    f"ctranslate2 generated lengths {sorted({len(t) for t in out})}, expected {n}"
                )
            return [tokens[:-1] for tokens in out]

        return run

    return build


GEN_SYSTEMS: dict[str, Callable[[BenchSize], Generate]] = {
    "odet-euler": _odet_generate("euler"),
    "odet-rk2": _odet_generate("rk2"),
    "odet-euler-concat-cache": _odet_generate("euler", preallocate=False),
    "odet-euler-bf16": _odet_generate("euler", dtype=torch.bfloat16),
    "odet-euler-int8": _odet_generate("euler", int8="odet"),
    "odet-euler-int8-qdyn": _odet_generate("euler", int8="qdyn"),
    "odet-euler-compiled": _odet_generate("euler", compile=True),
    "odet-euler-bf16-compiled": _odet_generate("euler", dtype=torch.bfloat16, compile=True),
    "odet-euler-int8-compiled": _odet_generate("euler", int8="odet", compile=True),
    "odet-dec-rk2": _odet_generate("euler", decoder_method="rk2"),
    "odet-dec-rk4": _odet_generate("euler", decoder_method="rk4"),
    "odet-dec-rk2-compiled": _odet_generate("euler", decoder_method="rk2", compile=True),
    "odet-dec-rk4-compiled": _odet_generate("euler", decoder_method="rk4", compile=True),
    "odet-euler-onednn": _odet_generate("euler", gemm="onednn"),
    # The Multi30k recipes' decoding settings (generation.precision auto, gemm auto): bf16 on a
    # device with bf16 matrix units, else fp32 on the GEMMs that auto picks.
    "odet-euler-recipe": _odet_generate("euler", gemm="auto", precision="auto"),
    "odet-dec-rk2-onednn": _odet_generate("euler", decoder_method="rk2", gemm="onednn"),
    "odet-dec-rk4-onednn": _odet_generate("euler", decoder_method="rk4", gemm="onednn"),
    "odet-dec-euler2x-onednn": _odet_generate("euler", gemm="onednn", decoder_depth=2),
    "odet-dec-euler4x-onednn": _odet_generate("euler", gemm="onednn", decoder_depth=4),
    "hf-marian": _marian_generate,
    "hf-marian-bf16": lambda size: _marian_generate(size, torch.bfloat16),
    "ct2-marian": _ct2_generate("float32"),
    "ct2-marian-int8": _ct2_generate("int8"),
}


def gen_sources(size: BenchSize, seed: int = 1) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(4, size.vocab_size, (size.gen_batch, size.src_len), generator=gen)


def parameters(model: nn.Module) -> int:
    """Distinct trainable parameters (tied matrices once; Marian's frozen positions excluded)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def iter_names(registry: dict[str, Any], wanted: list[str] | None) -> Iterator[str]:
    """The registry's names in order, restricted to ``wanted`` (unknown names are errors)."""
    if wanted is not None:
        unknown = sorted(set(wanted) - set(registry))
        if unknown:
            raise ValueError(f"unknown systems {unknown}; choose from {list(registry)}")
    yield from (name for name in registry if wanted is None or name in wanted)
