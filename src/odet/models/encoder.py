"""The one encoder builder of every model family (sequence-to-sequence, classifier, causal LM).

An encoder is a discrete stack of ``method`` blocks over :class:`~odet.nn.EncoderField`\\ s, or,
for ``method="continuous"``, N-ODE stacks over time-conditioned fields. Both answer
``integrate(x (B, T, D), padding_mask=…) -> StackResult(y, stats)``, so a model never asks
which kind it holds.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from odet.blocks import ContinuousEncoder, Stack, StackOptions, build_stack
from odet.blocks.continuous import build_continuous_encoder
from odet.models.config import CONTINUOUS, ContinuousEncoderConfig
from odet.nn import EncoderField, FieldSpec, TimeConditionedEncoderField

Encoder = Stack | ContinuousEncoder
"""What :func:`build_encoder` returns; both have ``integrate(x, padding_mask=…)``."""


def build_encoder(
    method: str,
    field: FieldSpec,
    num_layers: int,
    *,
    stack: StackOptions,
    continuous: ContinuousEncoderConfig,
    share_layers: bool = False,
) -> Encoder:
    """``num_layers`` blocks of ``method`` (``STACK_METHODS`` or ``"continuous"``).

    Discrete stacks use ``stack`` and, with ``share_layers``, tie every block to one layer;
    the continuous encoder uses ``continuous`` (solver, time conditioning, and its own dropout
    where ``continuous.field_dropout`` is set) and the widths, dropouts, activation and eps of
    ``field`` (its field returns its update: ``convention`` and ``stage_norm`` apply to
    discrete stacks).
    """
    if method == CONTINUOUS:
        if continuous.field_dropout is not None:
            rate = continuous.field_dropout
            field = replace(field, dropout=rate, attention_dropout=rate, activation_dropout=rate)
        widths = asdict(replace(field, convention="textbook", stage_norm=False))
        return build_continuous_encoder(
            lambda: TimeConditionedEncoderField(
                **widths,
                time_conditioning=continuous.time_conditioning,
                layer_norm=continuous.layer_norm,
                max_frequency=continuous.max_frequency,
                spectral_norm=continuous.spectral_norm,
            ),
            num_layers,
            continuous.solver_options,
        )
    shared = EncoderField(**asdict(field)) if share_layers else None
    return build_stack(
        method,
        (lambda: shared) if shared is not None else (lambda: EncoderField(**asdict(field))),
        num_layers,
        **asdict(stack),
    )
