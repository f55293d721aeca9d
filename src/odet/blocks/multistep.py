"""Multistep stacks: each block's update also uses what earlier blocks computed.

Both stacks give every block its own layer ``F_l`` (as the ODE Transformer paper's multistep
baselines do) and evaluate it once per block, so a decoder needs one self-attention cache per
block. The history of earlier blocks is a ``History`` value threaded through the stack's loop —
never state stored on modules — and, in incremental decoding, holds only the current positions:
it is recomputed in the same forward, so it needs no cache of its own.

- **Adams–Bashforth** (``ab2``, ``ab3``)::

      f_l     = F_l(y_l)
      y_{l+1} = y_l + Σ_{j<k} β_j f_{l−j}       β = (3/2, −1/2) or (23/12, −16/12, 5/12)

  Block ``l`` has only ``l + 1`` derivatives, so the first blocks start at lower order: block 0
  is an Euler step, block 1 an AB2 step, and so on up to order ``k``. With ``"learned"``
  coefficients each block's ``β`` are free scalars initialised to these values.

- **DLCL** (``dlcl``, dynamic linear combination of layers, Wang et al. 2019, the layer history
  of the ODE Transformer's released models)::

      x_l     = Σ_{k≤l} W[l, k] · n_k            n_0 = y_0 (the embedding), n_k = LN_k(y_k)
      y_{l+1} = x_l + F_l(x_l)                   (a pre-norm residual, i.e. Euler, step)
      output  = Σ_{k≤L} W[L, k] · n_k

  ``W`` is lower-triangular and learnable, each row initialised to the uniform average
  ``1/(l + 1)``. As in the released implementation for pre-norm models, the embedding enters
  without a norm and every layer output gets its own ``LN_k``; the last row combines all
  ``L + 1`` entries into the stack's output. A zero field does *not* give the identity: the
  combination averages normalised copies of the input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

import torch
from torch import Tensor, nn

from odet.blocks.base import Stack, arguments_of, stage_evaluator
from odet.blocks.coefficients import Coefficients, check_scheme, fixed_or_learned
from odet.blocks.ode_block import ODEBlock
from odet.ode.multistep import History, adams_bashforth_coefficients

MultistepScheme = Literal["fixed", "learned"]
"""Multistep weights ``β`` are kept or learned (the other schemes weigh RK stages)."""
MULTISTEP_SCHEMES: tuple[MultistepScheme, ...] = get_args(MultistepScheme)


class MultistepBlock(nn.Module):
    """``y_{l+1} = y_l + Σ_j w_j f_{l−j}`` after pushing ``f_l = F(y_l)`` onto the history.

    Args:
        field: the block's own layer ``F_l``.
        weights: ``w_0 …`` for the newest derivative first; their number is the history the
            block uses (the history passed in must hold at least ``len(weights) − 1`` values).
        coefficients: ``"fixed"`` keeps ``weights``; ``"learned"`` makes them parameters.
    """

    num_stages = 1

    def __init__(
        self,
        field: nn.Module,
        weights: Sequence[float],
        coefficients: MultistepScheme = "fixed",
    ):
        super().__init__()
        check_scheme(coefficients, MULTISTEP_SCHEMES, "multistep ")
        self.field = field
        self.steps = len(weights)
        self.coefficients: Coefficients = fixed_or_learned(coefficients, weights)

    def forward(
        self,
        y: Tensor,
        history: History,
        *,
        cache: Sequence[Any] | None = None,
        **field_kwargs: Any,
    ) -> tuple[Tensor, History]:
        """``y (B, T, D)`` and the earlier derivatives → ``(y_next, history with f_l)``."""
        evaluate = stage_evaluator(self.field, self.num_stages, cache, field_kwargs)
        history = history.push(evaluate(0, y))
        if len(history) < self.steps:
            raise ValueError(
                f"a {self.steps}-step block got a history of {len(history)} derivatives"
            )
        derivatives = history.newest_first()[: self.steps]
        return y + self.coefficients(derivatives), history

    def extra_repr(self) -> str:
        return f"steps={self.steps}"


class AdamsBashforthStack(Stack):
    """``order``-step Adams–Bashforth over one layer per block, lower-order start (module doc)."""

    def __init__(
        self,
        fields: Sequence[nn.Module],
        order: int,
        coefficients: MultistepScheme = "fixed",
    ):
        super().__init__()
        if not isinstance(order, int) or order < 1:
            raise ValueError(f"Adams–Bashforth order must be a positive int, got {order!r}")
        self.order = order
        self.blocks = nn.ModuleList(
            MultistepBlock(field, adams_bashforth_coefficients(min(l + 1, order)), coefficients)
            for l, field in enumerate(fields)
        )

    def forward(
        self,
        y: Tensor,
        *,
        block_kwargs: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """``y (B, T, D)``; the derivative history lives only inside this loop."""
        history = History(capacity=self.order)
        for l, block in enumerate(self.blocks):
            y, history = self.run_block(block, y, history, **arguments_of(l, block_kwargs, kwargs))
        return y

    def extra_repr(self) -> str:
        return f"order={self.order}"


class DLCLStack(Stack):
    """Blocks whose inputs are learned combinations of all earlier outputs (module doc).

    The ``dlcl`` method gives each block an Euler step over its own layer; as a *layer
    history* (``history="dlcl"`` of ``build_stack``, the ODE Transformer's released models) the
    same combination wraps any one-step blocks — RK steps with any coefficients (a shared gate
    stays shared), predictor–corrector or implicit blocks.

    Args:
        fields: one layer per block, each integrated by an Euler step; or ``()`` with ``blocks``.
        d_model: feature width (for the per-layer norms).
        norm_eps: the norms' epsilon.
        blocks: the one-step blocks to wrap instead of Euler steps over ``fields``.
    """

    def __init__(
        self,
        fields: Sequence[nn.Module],
        d_model: int,
        *,
        norm_eps: float = 1e-5,
        blocks: Sequence[nn.Module] = (),
    ):
        super().__init__()
        if bool(fields) == bool(blocks):
            raise ValueError("DLCLStack takes fields (Euler blocks) or blocks, exactly one of them")
        self.blocks = nn.ModuleList(blocks or [ODEBlock(field, "euler") for field in fields])
        depth = len(self.blocks)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model, eps=norm_eps) for _ in range(depth))
        # Row l (l = 0 … L) weighs the l + 1 entries n_0 … n_l; only the lower triangle exists.
        self.weights = nn.ParameterList(
            nn.Parameter(torch.full((l + 1,), 1.0 / (l + 1))) for l in range(depth + 1)
        )

    def combine(self, history: History) -> Tensor:
        """``Σ_k W[l, k] n_k`` for the ``l + 1`` entries of ``history`` (oldest first)."""
        w = self.weights[len(history) - 1]
        out = w[0] * history.values[0]
        for k in range(1, len(history)):
            out = out + w[k] * history.values[k]
        return out

    def forward(
        self,
        y: Tensor,
        *,
        block_kwargs: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """``y (B, T, D)`` is ``y_0``; the normalised layer history lives only in this loop."""
        history = History().push(y)
        for l, (block, norm) in enumerate(zip(self.blocks, self.norms)):
            y = self.run_block(
                block, self.combine(history), **arguments_of(l, block_kwargs, kwargs)
            )
            history = history.push(norm(y))
        return self.combine(history)

    def combination_weights(self) -> Tensor:
        """``W`` as a dense ``(L + 1, L + 1)`` lower-triangular matrix (for analysis)."""
        depth = len(self.weights)
        dense = torch.zeros(depth, depth)
        for l, row in enumerate(self.weights):
            dense[l, : l + 1] = row.detach()
        return dense
