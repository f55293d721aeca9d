"""Parameter counts from a config alone, before a model is built.

A config that asks for ``2**40`` layers, or a ``d_model × vocab_size`` embedding larger than any
memory, would otherwise spend hours constructing modules before the first allocation fails.
The counts here follow the module shapes of every model family and block method (a test
compares them with ``sum(p.numel())`` of built models), so :func:`check_model_fits` can refuse
such a model in microseconds with the same one-line message as any other allocation too large.
"""

from __future__ import annotations

import os
from dataclasses import replace

from odet.blocks import STACK_METHODS, StackOptions
from odet.blocks.coefficients import GATED_SCHEMES
from odet.models.causal_lm import CausalLMConfig
from odet.models.classifier import ClassifierConfig
from odet.models.config import CONTINUOUS, ContinuousEncoderConfig, Seq2SeqConfig
from odet.nn import FieldSpec
from odet.ode import TABLEAUS

__all__ = [
    "ModelTooLargeError",
    "check_model_fits",
    "memory_bytes",
    "model_parameters",
    "stack_parameters",
]


class ModelTooLargeError(MemoryError):
    """A model whose weights alone exceed the machine's memory; ``detail`` says by how much."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _norm(d: int, bias: bool = True) -> int:
    return d + d * bias


def _linear(n_in: int, n_out: int, bias: bool = True) -> int:
    return n_in * n_out + n_out * bias


def _self_attention(spec: FieldSpec) -> int:
    d, b = spec.d_model, spec.bias
    count = _linear(d, 3 * d, b) + _linear(d, d, b)
    if spec.max_relative_distance is not None:
        table = (2 * spec.max_relative_distance + 1) * (d // spec.num_heads)
        count += table * (1 + spec.relative_values)
    return count


def _feed_forward(spec: FieldSpec) -> int:
    return _linear(spec.d_model, spec.ffn_dim, spec.bias) + _linear(
        spec.ffn_dim, spec.d_model, spec.bias
    )


def _field(spec: FieldSpec, *, cross: bool) -> int:
    """An encoder or causal field (``cross=False``) or a decoder field."""
    d = spec.d_model
    norms = 3 if cross else 2
    count = norms * _norm(d, spec.bias) + _self_attention(spec) + _feed_forward(spec)
    if cross:
        count += 4 * _linear(d, d)  # cross-attention projections always have biases
    return count + (_norm(d, spec.bias) if spec.stage_norm else 0)


def _time_conditioning(kind: str, d: int) -> int:
    features = d + d % 2
    return {
        "none": 0,
        "concat": _linear(d + 1, d),
        "embedding": _linear(features, d),
        "film": _linear(features, 2 * d),
    }[kind]


def _continuous_field(spec: FieldSpec, continuous: ContinuousEncoderConfig) -> int:
    d = spec.d_model
    count = _self_attention(spec) + _feed_forward(spec)
    count += 2 * _time_conditioning(continuous.time_conditioning, d)
    return count + (2 * _norm(d, spec.bias) if continuous.layer_norm else 0)


def _coefficients(scheme: str, stages: int, d: int | None) -> int:
    """Parameters of one block's stage weights (one-stage blocks have none)."""
    if stages == 1 or scheme == "fixed":
        return 0
    return {"learned": stages, "ema": 1}.get(scheme, 2 * (d or 0) + 1)


def _history(layers: int, d: int | None) -> int:
    """A DLCL layer history: a norm per block and the lower triangle of ``W``."""
    return layers * _norm(d or 0) + (layers + 1) * (layers + 2) // 2


def stack_parameters(method: str, field: int, layers: int, options: StackOptions) -> int:
    """Parameters of ``layers`` blocks of ``method`` over fields of ``field`` parameters each."""
    family = STACK_METHODS[method].family
    scheme, d = options.coefficients, options.d_model
    count = layers * field
    if family == "runge_kutta":
        stages = TABLEAUS[method].num_stages
        per_block = _coefficients(scheme, stages, d)
        shared = stages > 1 and scheme in GATED_SCHEMES and options.share_gate
        count += per_block if shared else layers * per_block
    elif family == "multistep":
        order = int(method.removeprefix("ab"))
        if scheme != "fixed":
            count += sum(min(l + 1, order) for l in range(layers))
    elif family == "dlcl":
        count += _history(layers, d)
    elif family == "predictor_corrector":
        rk2 = TABLEAUS["rk2"].num_stages
        corrector = 0 if scheme == "fixed" else rk2 + 1
        count += layers * (_coefficients(scheme, rk2, d) + corrector)
    if options.history == "dlcl":
        count += _history(layers, d)
    return count


def _encoder(
    method: str,
    spec: FieldSpec,
    layers: int,
    options: StackOptions,
    continuous: ContinuousEncoderConfig,
    *,
    shared_field: bool = False,
) -> int:
    if method == CONTINUOUS:
        spec = replace(spec, convention="textbook", stage_norm=False)
        return layers * _continuous_field(spec, continuous)
    field = _field(spec, cross=False)
    if not shared_field:
        return stack_parameters(method, field, layers, options)
    return field + stack_parameters(method, 0, layers, options)


def model_parameters(config: Seq2SeqConfig | CausalLMConfig | ClassifierConfig) -> int:
    """The number of distinct parameters a model of ``config`` has (tied weights counted once),
    computed from the config without building anything."""
    if isinstance(config, Seq2SeqConfig):
        c, d = config, config.d_model
        embeddings = c.vocab_size * d
        if not c.share_all_embeddings:
            embeddings += c.target_vocab_size * d
        if not (c.share_decoder_embeddings or c.share_all_embeddings):
            embeddings += c.target_vocab_size * d
        encoder = _encoder(
            c.encoder_method,
            c.field_spec,
            c.encoder_layers,
            c.stack_options(c.coefficients, c.encoder_history),
            c.continuous,
        )
        decoder = stack_parameters(
            c.decoder_method,
            _field(c.decoder_field_spec, cross=True),
            c.decoder_layers,
            c.stack_options(c.decoder_scheme, c.decoder_history),
        )
        return embeddings + encoder + decoder + 2 * _norm(d)
    if isinstance(config, CausalLMConfig):
        c, d = config, config.d_model
        count = c.vocab_size * d * (1 if c.tie_embeddings else 2)
        count += c.block_size * d if c.positions == "learned" else 0
        field = _field(c.field_spec, cross=False)
        return (
            count + stack_parameters(c.method, field, c.layers, c.stack_options) + _norm(d, c.bias)
        )
    c, d = config, config.d_model
    count = c.vocab_size * d + (d if c.pooling == "cls" else 0) + _linear(d, c.num_classes)
    count += _norm(d) if c.final_norm else 0
    options = StackOptions(c.coefficients, d)
    encoder = _encoder(
        c.encoder_method,
        c.field_spec,
        c.encoder_layers,
        options,
        c.continuous,
        shared_field=c.share_layers,
    )
    return count + encoder


def memory_bytes() -> int | None:
    """Physical memory of this machine in bytes (``None`` where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_model_fits(
    config: Seq2SeqConfig | CausalLMConfig | ClassifierConfig, memory: int | None = None
) -> int:
    """The parameter count of ``config``; ``MemoryError`` when its fp32 weights alone exceed
    ``memory`` (default: this machine's), before any module is built."""
    parameters = model_parameters(config)
    limit = memory_bytes() if memory is None else memory
    if limit is not None and 4 * parameters > limit:
        raise ModelTooLargeError(
            f"{4 * parameters / 2**30:.1f} GiB requested for the model's {parameters:,} fp32 "
            f"weights; this machine has {limit / 2**30:.1f} GiB"
        )
    return parameters
