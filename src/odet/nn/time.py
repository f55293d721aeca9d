"""Time-conditioned encoder fields ``F(t, z)`` for continuous-depth (N-ODE) Transformers.

A weight-tied continuous stack integrates one layer over ``t ∈ [0, T]``; for it to act like a
stack of *different* layers, ``F`` must be able to depend on ``t``. Time enters as a value
applied to the input of each sublayer (self-attention and FFN), chosen by name:

- ``"none"``: ``F(t, z) = F(z)``, an autonomous field;
- ``"concat"``: ``x ↦ W [x; t] + b`` with ``W`` of shape ``(D, D + 1)``, i.e. ``t`` appended as one
  more input feature and projected back to ``D`` (torchdiffeq's ``ConcatLinear`` idea placed in
  front of the sublayer, whose own input projection is linear, so it sees ``t`` as a feature);
  ``W`` starts as ``[I | u]`` (``u`` drawn as nn.Linear draws that column, ``b = 0``);
- ``"embedding"``: ``x ↦ x + P e(t)``, ``e(t)`` a sinusoidal embedding of ``t`` (see
  :func:`time_features`), ``P`` a learned projection to ``D`` (nn.Linear's default init);
- ``"film"``: ``x ↦ (1 + γ(t)) ⊙ x + β(t)``, ``[γ; β] = P e(t)`` with ``P`` zero-initialised, so
  the field equals the ``"none"`` field at initialisation (as adaLN-Zero in DiT).

``t`` arrives as a python float (fixed-step solvers: one time for the batch) or a ``(B,)`` tensor
(adaptive solvers: every sample has its own time); both are accepted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import Tensor, nn

from odet.nn.dropout import Dropout
from odet.nn.fields import FieldSpec, widen

TimeConditioning = Literal["none", "concat", "embedding", "film"]


def time_column(t: float | Tensor, z: Tensor) -> Tensor:
    """``t`` (float, 0-d or ``(B,)`` tensor) as a ``(B,)`` tensor in ``z``'s dtype and device."""
    batch = z.shape[0]
    if not isinstance(t, Tensor):
        return z.new_full((batch,), float(t))
    if t.ndim == 0 or t.shape == (1,):
        return t.to(z).reshape(1).expand(batch)
    if t.shape != (batch,):
        raise ValueError(
            f"t must be a float, a 0-d tensor or a ({batch},) tensor, got shape {tuple(t.shape)}"
        )
    return t.to(z)


def time_features(t: Tensor, dim: int, max_frequency: float) -> Tensor:
    """Sinusoidal features of times ``t (B,)``: ``(B, dim)``, sines then cosines.

    Angular frequencies are spaced geometrically from 1 to ``max_frequency`` (radians per unit
    of time). Unlike token positions, ``t`` is continuous and the field is integrated in ``t``:
    a frequency ``ω`` makes ``F`` oscillate on a time scale ``1/ω``, which an adaptive solver
    must resolve with steps of that size, so the highest frequency bounds the step size.
    """
    if dim < 2 or dim % 2:
        raise ValueError(f"time feature dim must be even and >= 2, got {dim}")
    half = dim // 2
    exponent = torch.arange(half, dtype=t.dtype, device=t.device) / max(half - 1, 1)
    freq = max_frequency**exponent  # (half,)
    angles = t[:, None] * freq[None, :]  # (B, half)
    return torch.cat([angles.sin(), angles.cos()], dim=1)


class NoTime(nn.Module):
    """``x ↦ x``: the autonomous field."""

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        return x


class ConcatTime(nn.Module):
    """``x ↦ W [x; t] + b``, ``W (D, D + 1)`` initialised to ``[I | u]``, ``b = 0``."""

    def __init__(self, d_model: int, max_frequency: float) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model + 1, d_model)
        with torch.no_grad():
            self.proj.weight[:, :d_model].copy_(torch.eye(d_model))
            self.proj.bias.zero_()

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        """``x (B, T, D)``, ``t (B,)`` → ``(B, T, D)``."""
        column = t[:, None, None].expand(*x.shape[:-1], 1)
        return self.proj(torch.cat([x, column], dim=-1))


class EmbeddingTime(nn.Module):
    """``x ↦ x + P e(t)`` with ``e`` the sinusoidal features of :func:`time_features`."""

    def __init__(self, d_model: int, max_frequency: float) -> None:
        super().__init__()
        self.dim = d_model + d_model % 2
        self.max_frequency = max_frequency
        self.proj = nn.Linear(self.dim, d_model)

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        """``x (B, T, D)``, ``t (B,)`` → ``(B, T, D)``."""
        shift = self.proj(time_features(t, self.dim, self.max_frequency))  # (B, D)
        return x + shift[:, None, :]


class FiLMTime(nn.Module):
    """``x ↦ (1 + γ(t)) ⊙ x + β(t)``, ``[γ; β] = P e(t)``, ``P`` zero-initialised (identity)."""

    def __init__(self, d_model: int, max_frequency: float) -> None:
        super().__init__()
        self.dim = d_model + d_model % 2
        self.max_frequency = max_frequency
        self.proj = nn.Linear(self.dim, 2 * d_model)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        """``x (B, T, D)``, ``t (B,)`` → ``(B, T, D)``."""
        gamma, beta = self.proj(time_features(t, self.dim, self.max_frequency)).chunk(2, dim=-1)
        return x * (1.0 + gamma[:, None, :]) + beta[:, None, :]


TIME_CONDITIONINGS: dict[str, Callable[[int, float], nn.Module]] = {
    "none": lambda d_model, max_frequency: NoTime(),
    "concat": ConcatTime,
    "embedding": EmbeddingTime,
    "film": FiLMTime,
}
"""Time conditioning by name: ``factory(d_model, max_frequency) -> module(x, t)``."""


def make_time_conditioning(name: str, d_model: int, max_frequency: float = 10.0) -> nn.Module:
    """The conditioning module ``(x (B, T, D), t (B,)) -> (B, T, D)`` called ``name``."""
    if name not in TIME_CONDITIONINGS:
        raise ValueError(
            f"unknown time_conditioning {name!r}; choose one of {list(TIME_CONDITIONINGS)}"
        )
    if not (math.isfinite(max_frequency) and max_frequency >= 1.0):
        raise ValueError(f"max_frequency must be a finite number >= 1, got {max_frequency}")
    return TIME_CONDITIONINGS[name](d_model, max_frequency)


class TimeConditionedEncoderField(nn.Module):
    """``F(t, z) = a + FFN(N₂(z + a) | t)``, ``a = SelfAttn(N₁ z | t)``: ``(B, T, D) -> (B, T, D)``.

    The sublayers of :class:`~odet.nn.EncoderField`; ``N`` is a LayerNorm, or the identity with
    ``layer_norm=False`` (the N-ODE Transformer has neither layer norm nor dropout), and
    ``x | t`` is the time conditioning of each sublayer's input (module docstring). Dropout makes
    ``F`` random, which an adaptive solver reads as error (rejected steps): keep it 0 there.
    Padded positions: attention ignores them as keys; the field's value *at* them is whatever
    the layer computes (a continuous stack zeroes it, see ``odet.blocks.continuous``).
    ``spectral_norm=True`` divides the weight of each of its linear layers (attention
    projections, feed-forward, time conditioning) by its largest singular value, estimated by
    one power iteration per training forward (``torch.nn.utils.parametrizations.spectral_norm``),
    which bounds how fast ``F`` can grow with ``‖z‖``. ``options``: the other fields of
    :class:`~odet.nn.FieldSpec` (the field is ``a + f``: ``convention="textbook"`` and no
    ``stage_norm``).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ffn_dim: int,
        *,
        time_conditioning: TimeConditioning = "none",
        layer_norm: bool = True,
        max_frequency: float = 10.0,
        spectral_norm: bool = False,
        **options: Any,
    ) -> None:
        super().__init__()
        spec = FieldSpec(d_model, num_heads, ffn_dim, **options)
        if spec.convention != "textbook" or spec.stage_norm:
            raise ValueError(
                "a time-conditioned field returns its update (convention='textbook', "
                f"stage_norm=False), got convention={spec.convention!r}, "
                f"stage_norm={spec.stage_norm}"
            )
        self.d_model = d_model
        self.time_conditioning = time_conditioning
        self.attn_norm = spec.norm() if layer_norm else nn.Identity()
        self.attn_time = make_time_conditioning(time_conditioning, d_model, max_frequency)
        self.self_attn = spec.self_attention()
        self.ffn_norm = spec.norm() if layer_norm else nn.Identity()
        self.ffn_time = make_time_conditioning(time_conditioning, d_model, max_frequency)
        self.ffn = spec.feed_forward()
        self.dropout = Dropout(spec.dropout)
        self.spectral_norm = spectral_norm
        if spectral_norm:
            for module in list(self.modules()):
                if isinstance(module, nn.Linear):
                    nn.utils.parametrizations.spectral_norm(module)

    def forward(
        self, t: float | Tensor, z: Tensor, *, padding_mask: Tensor | None = None
    ) -> Tensor:
        """``t`` float or ``(B,)``, ``z (B, T, D)``, ``padding_mask (B, T)`` True at padding."""
        tt = time_column(t, z)  # (B,)
        a = self.self_attn(self.attn_time(self.attn_norm(z), tt), padding_mask=padding_mask)
        a = widen(z, self.dropout(a))
        f = widen(z, self.dropout(self.ffn(self.ffn_time(self.ffn_norm(z + a), tt))))
        return a + f

    def extra_repr(self) -> str:
        spectral = ", spectral_norm=True" if self.spectral_norm else ""
        return f"time_conditioning={self.time_conditioning!r}{spectral}"
