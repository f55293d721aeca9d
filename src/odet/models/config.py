"""The model configurations: typed, validated on construction, serialisable."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from odet.blocks import (
    STACK_METHODS,
    CoefficientScheme,
    LayerHistory,
    StackOptions,
    coefficient_problem,
    history_problem,
)
from odet.config import check, check_types, from_dict, require_mapping, suggest, to_dict
from odet.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from odet.models.presets import PRESETS
from odet.nn import Activation, FieldConvention, FieldSpec, PositionScheme, TimeConditioning
from odet.ode import SolverOptions

CONTINUOUS = "continuous"
"""``encoder_method`` of the N-ODE encoder: one time-conditioned layer per block, integrated by
an ODE solver (adaptive, or fixed steps of a tableau); its settings are a
:class:`ContinuousEncoderConfig`."""

MAX_LAYERS = 10_000
"""The most blocks (or ODE stacks) a model config may ask for per stack: ten times the deepest
published Transformers, and far below the depth whose modules alone take hours to build."""


def check_layers(where: str, value: int) -> None:
    """``value`` blocks in ``[1, MAX_LAYERS]`` (``where`` names the key in the message)."""
    check(value >= 1, f"{where} must be >= 1, got {value}")
    check(value <= MAX_LAYERS, f"{where} must be at most {MAX_LAYERS}, got {value}")


ENCODER_METHOD_ALIASES: dict[str, str] = {"adaptive": CONTINUOUS}
"""Other spellings of ``encoder_method``, normalised on construction (configs and checkpoints
written before issue #20 say ``"adaptive"``, also for fixed steps)."""


def canonical_encoder_method(method: str) -> str:
    """``method`` with an alias of :data:`ENCODER_METHOD_ALIASES` replaced by its name."""
    return ENCODER_METHOD_ALIASES.get(method, method)


@dataclass(frozen=True)
class ContinuousEncoderConfig(SolverOptions):
    """The N-ODE encoder (``encoder_method="continuous"``): ``dy/dt = F(t, y)`` on ``[t0, t1]``.

    The solver keys are the fields of :class:`~odet.ode.SolverOptions` (a config section keeps
    them flat); the fields below shape the time-conditioned layer ``F``.
    """

    time_conditioning: TimeConditioning = "embedding"
    """How ``t`` enters ``F`` (``odet.nn.TIME_CONDITIONINGS``)."""
    layer_norm: bool = True
    """Layer norms before the sublayers; ``False`` is the N-ODE Transformer's field."""
    max_frequency: float = 10.0
    """Highest angular frequency of the sinusoidal time features (bounds the step size)."""
    spectral_norm: bool = False
    """Spectrally normalise the field's linear layers (each weight divided by its largest
    singular value, one power iteration per training solve): bounds the growth of ``F`` with
    ``‖y‖`` and so of ``y(t1)``; ``False`` is the N-ODE Transformer's field."""
    field_dropout: float | None = None
    """Every dropout inside the field (sublayer outputs, attention weights, after the
    activation) set to this rate; ``None``: the model's ``dropout``, ``attention_dropout`` and
    ``activation_dropout``. Fresh masks at each evaluation make ``F`` noisy for an adaptive
    solver's error control, which then takes more steps; ``0`` makes the field deterministic."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(
            self.field_dropout is None
            or (isinstance(self.field_dropout, int | float) and 0.0 <= self.field_dropout < 1.0),
            f"ContinuousEncoderConfig.field_dropout must be null or a number in [0, 1), got "
            f"{self.field_dropout!r}",
        )
        check(
            math.isfinite(self.max_frequency) and self.max_frequency >= 1.0,
            f"ContinuousEncoderConfig.max_frequency must be a finite number >= 1, got "
            f"{self.max_frequency}",
        )

    @property
    def solver_options(self) -> SolverOptions:
        """The solver part alone (what a continuous stack takes)."""
        return SolverOptions(**{f.name: getattr(self, f.name) for f in fields(SolverOptions)})


def _check_preset(name: object) -> None:
    check(
        isinstance(name, str) and name in PRESETS,
        f"model.preset = {name!r} is not a known architecture{suggest(str(name), PRESETS)}; "
        f"choose one of {sorted(PRESETS)}",
    )


@dataclass(frozen=True)
class Seq2SeqConfig:
    """An encoder–decoder ODE Transformer.

    ``encoder_method`` / ``decoder_method`` name the integrator of each stack (``"euler"`` is the
    ordinary pre-norm Transformer; ``"rk2"``, ``"rk4"`` … are RK blocks over shared layers;
    ``"ab2"``, ``"ab3"``, ``"dlcl"``, ``"pc"``, ``"implicit_euler"`` are the multistep,
    layer-history, predictor–corrector and implicit stacks of ``odet.blocks.STACK_METHODS``;
    the encoder may also be ``"continuous"``, alias ``"adaptive"``).
    ``coefficients`` applies to every stack whose blocks weigh stages (``decoder_coefficients``
    overrides it for the decoder); a scheme the method cannot use is an error, and methods
    without stage weights (``euler``, ``dlcl``, ``implicit_euler``) ignore it.
    ``pad_id``, ``unk_id``, ``bos_id``, ``eos_id`` are the special token ids (padding, unknown,
    beginning of sequence — the decoder's first input — and end of sequence).
    """

    vocab_size: int
    """Source vocabulary size (also the target's unless ``tgt_vocab_size`` is set)."""
    preset: str | None = None
    """The named architecture these keys started from (``odet.models.presets.PRESETS``, e.g.
    ``ode_relative_transformer_t2t_wmt_en_de_big``); keys given beside it override its."""
    d_model: int = 512
    """Feature width ``D``."""
    num_heads: int = 8
    """Attention heads per layer."""
    ffn_dim: int = 2048
    """Hidden width of the feed-forward sublayers."""
    encoder_layers: int = 6
    """Encoder blocks (each over its own layer; at most 10,000)."""
    decoder_layers: int = 6
    """Decoder blocks (at most 10,000)."""
    encoder_method: str = "euler"
    """The encoder's integrator: a name of ``STACK_METHODS`` or ``"continuous"``."""
    decoder_method: str = "euler"
    """The decoder's integrator: a name of ``STACK_METHODS``."""
    coefficients: CoefficientScheme = "fixed"
    """How blocks weigh their stages (``odet.blocks.COEFFICIENTS``)."""
    decoder_coefficients: CoefficientScheme | None = None
    """The decoder's scheme, if not ``coefficients``."""
    share_gate: bool = False
    """One RK2 gate per stack instead of one per block (the paper's code)."""
    implicit_iterations: int = 2
    """Fixed-point iterations of ``implicit_euler`` blocks."""
    encoder_history: LayerHistory = "none"
    """``"dlcl"``: a learned dense layer history around the encoder's blocks (the paper's
    models); any one-step method (RK, ``pc``, ``implicit_euler``) can be wrapped."""
    decoder_history: LayerHistory = "none"
    """The decoder's layer history (exact under incremental decoding)."""
    continuous: ContinuousEncoderConfig = field(default_factory=ContinuousEncoderConfig)
    """Solver and field of the ``"continuous"`` encoder (ignored by discrete encoders)."""
    field_convention: FieldConvention = "textbook"
    """``"textbook"`` ``F = Layer − id`` or the paper code's ``"layer"`` (discrete stacks)."""
    decoder_field_convention: FieldConvention | None = None
    """The decoder's convention, if not ``field_convention`` (the paper's model: ``"layer"``
    in its RK encoder, an ordinary residual decoder, i.e. ``"textbook"``)."""
    stage_norm: bool = False
    """Layer-normalise every stage's output (discrete stacks; needed by ``"layer"``)."""
    dropout: float = 0.1
    """Dropout on embeddings and sublayer outputs."""
    attention_dropout: float = 0.0
    """Dropout on attention weights."""
    activation_dropout: float = 0.0
    """Dropout after the feed-forward activation."""
    activation: Activation = "relu"
    """The feed-forward activation."""
    max_positions: int = 1024
    """Longest source or target (the length of the sinusoidal position table)."""
    positions: PositionScheme = "sinusoidal"
    """Absolute sinusoids on the embeddings, ``"relative"`` representations in every
    self-attention (Shaw et al.; not in cross-attention), or ``"both"`` (the paper's code)."""
    max_relative_distance: int = 8
    """Relative positions: distances are clipped to ``[−k, k]``; each layer learns ``2k + 1``
    key (and value) vectors per head dimension."""
    relative_values: bool = False
    """Relative positions for the values too (the paper's code: keys only)."""
    tgt_vocab_size: int | None = None
    """Target vocabulary size when it differs from the source's."""
    share_all_embeddings: bool = False
    """One embedding for source, target and output (needs one joint vocabulary)."""
    share_decoder_embeddings: bool = True
    """Tie the output projection to the target embedding."""
    scale_embeddings: bool = True
    """Multiply embeddings by ``√D``."""
    norm_eps: float = 1e-5
    """Epsilon of every layer norm."""
    pad_id: int = PAD_ID
    """Padding id (set from the tokenizer by the trainer)."""
    unk_id: int = UNK_ID
    """Unknown-token id."""
    bos_id: int = BOS_ID
    """Beginning-of-sentence id: the first decoder input."""
    eos_id: int = EOS_ID
    """End-of-sentence id: ends a hypothesis."""

    def __post_init__(self) -> None:
        check_types(self)
        object.__setattr__(self, "encoder_method", canonical_encoder_method(self.encoder_method))
        for key in ("vocab_size", "d_model", "num_heads", "ffn_dim", "max_positions"):
            check(
                getattr(self, key) >= 1,
                f"Seq2SeqConfig.{key} must be >= 1, got {getattr(self, key)}",
            )
        for key in ("encoder_layers", "decoder_layers"):
            check_layers(f"Seq2SeqConfig.{key}", getattr(self, key))
        check(
            self.d_model % self.num_heads == 0,
            f"Seq2SeqConfig.d_model ({self.d_model}) must be divisible by num_heads "
            f"({self.num_heads})",
        )
        for key in ("dropout", "attention_dropout", "activation_dropout"):
            check(
                0.0 <= getattr(self, key) < 1.0,
                f"Seq2SeqConfig.{key} must lie in [0, 1), got {getattr(self, key)}",
            )
        for key, methods in (
            ("encoder_method", [*STACK_METHODS, CONTINUOUS]),
            ("decoder_method", list(STACK_METHODS)),
        ):
            method = getattr(self, key)
            check(
                method in methods,
                f"Seq2SeqConfig.{key} = {method!r} is not a known method"
                f"{suggest(method, methods)}; choose one of {sorted(methods)}",
            )
        for key, method_key, scheme in (
            ("coefficients", "encoder_method", self.coefficients),
            ("decoder_coefficients", "decoder_method", self.decoder_scheme),
        ):
            if getattr(self, method_key) == CONTINUOUS:
                continue
            method = getattr(self, method_key)
            problem = coefficient_problem(method, scheme)
            check(
                not problem,
                f"Seq2SeqConfig.{key} = {scheme!r} with {method_key} = {method!r}: {problem}",
            )
        for key, method_key in (
            ("encoder_history", "encoder_method"),
            ("decoder_history", "decoder_method"),
        ):
            history, method = getattr(self, key), getattr(self, method_key)
            if history == "none":
                continue
            problem = (
                f"a {history!r} layer history cannot wrap the continuous encoder"
                if method == CONTINUOUS
                else history_problem(method, history)
            )
            check(
                not problem,
                f"Seq2SeqConfig.{key} = {history!r} with {method_key} = {method!r}: {problem}",
            )
        if self.tgt_vocab_size is not None:
            check(self.tgt_vocab_size >= 1, "Seq2SeqConfig.tgt_vocab_size must be >= 1")
        check(
            not self.share_all_embeddings or self.target_vocab_size == self.vocab_size,
            "Seq2SeqConfig.share_all_embeddings needs one joint vocabulary (tgt_vocab_size "
            f"{self.tgt_vocab_size} != vocab_size {self.vocab_size})",
        )
        ids = {
            "pad_id": self.pad_id,
            "unk_id": self.unk_id,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
        }
        check(len(set(ids.values())) == 4, f"Seq2SeqConfig special ids must be distinct: {ids}")
        for key, value in ids.items():
            check(
                0 <= value < min(self.vocab_size, self.target_vocab_size),
                f"Seq2SeqConfig.{key} = {value} is outside the vocabulary",
            )
        check(self.norm_eps > 0, "Seq2SeqConfig.norm_eps must be > 0")
        if self.preset is not None:
            _check_preset(self.preset)
        check(
            self.max_relative_distance >= 1,
            f"Seq2SeqConfig.max_relative_distance must be >= 1, got {self.max_relative_distance}",
        )
        check(self.implicit_iterations >= 0, "Seq2SeqConfig.implicit_iterations must be >= 0")

    @property
    def target_vocab_size(self) -> int:
        return self.vocab_size if self.tgt_vocab_size is None else self.tgt_vocab_size

    @property
    def decoder_scheme(self) -> CoefficientScheme:
        return self.coefficients if self.decoder_coefficients is None else self.decoder_coefficients

    @property
    def decoder_field_spec(self) -> FieldSpec:
        """What the decoder's fields are built from: ``field_spec`` with the decoder's
        convention."""
        convention = self.decoder_field_convention or self.field_convention
        return replace(self.field_spec, convention=convention)

    @property
    def field_spec(self) -> FieldSpec:
        """What the encoder's fields are built from (the decoder's: ``decoder_field_spec``)."""
        same = ("dropout", "attention_dropout", "activation_dropout", "activation", "stage_norm")
        return FieldSpec(
            self.d_model,
            self.num_heads,
            self.ffn_dim,
            convention=self.field_convention,
            norm_eps=self.norm_eps,
            max_relative_distance=(
                None if self.positions == "sinusoidal" else self.max_relative_distance
            ),
            relative_values=self.relative_values,
            **{key: getattr(self, key) for key in same},
        )

    def stack_options(
        self, coefficients: CoefficientScheme, history: LayerHistory = "none"
    ) -> StackOptions:
        """The options of a discrete stack whose blocks weigh stages with ``coefficients``,
        wrapped in layer ``history``."""
        return StackOptions(
            coefficients,
            self.d_model,
            self.share_gate,
            self.implicit_iterations,
            self.norm_eps,
            history,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Seq2SeqConfig:
        """Build from a mapping (e.g. YAML); unknown keys are errors naming the closest key.
        With ``preset``, that architecture's keys (``odet.models.presets.PRESETS``) come first
        and the mapping's other keys override them."""
        require_mapping(data, "model")
        preset = data.get("preset")
        if preset is not None:
            _check_preset(preset)
            data = {**PRESETS[preset], **data}
        return from_dict(cls, data, where="model")

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)
