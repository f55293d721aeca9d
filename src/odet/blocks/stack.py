"""Stacks of blocks built from a method name: the registry of every ``encoder_method`` /
``decoder_method``.

==================  ====================  ===================================================
method              family                block ``l`` (layer ``F_l``), stages per block
==================  ====================  ===================================================
euler, rk2, rk4, …  runge_kutta           one RK step of the tableau over ``F_l``; ``s``
ab2, ab3            multistep             Adams–Bashforth over ``F_l, F_{l−1}, …``; 1
dlcl                dlcl                  Euler step on a learned mix of earlier outputs; 1
pc                  predictor_corrector   RK2 predictor + corrector ``F_l(P)``; 3
implicit_euler      implicit              ``y' = y + F_l(y')`` by fixed-point iteration; 1 + M
==================  ====================  ===================================================
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from torch import Tensor, nn

from odet.blocks.base import Stack, arguments_of
from odet.blocks.coefficients import (
    ANY_STAGE_SCHEMES,
    COEFFICIENTS,
    GATED_SCHEMES,
    Coefficients,
    CoefficientScheme,
    check_scheme,
    make_coefficients,
)
from odet.blocks.implicit import DEFAULT_ITERATIONS, ImplicitEulerBlock
from odet.blocks.multistep import MULTISTEP_SCHEMES, AdamsBashforthStack, DLCLStack
from odet.blocks.ode_block import ODEBlock
from odet.blocks.predictor_corrector import PC_SCHEMES, PredictorCorrectorBlock
from odet.ode import TABLEAUS, ButcherTableau


class RungeKuttaStack(Stack):
    """``y_{l+1} = block_l(y_l)`` for ``L`` one-step blocks, each over its own layer.

    The blocks are RK steps (``ODEBlock``), or the predictor–corrector and fixed-point implicit
    blocks, which are explicit RK methods in disguise: none needs anything but ``y_l``.
    """

    def __init__(self, blocks: Sequence[nn.Module]):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(
        self,
        y: Tensor,
        *,
        block_kwargs: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """``y (B, T, D)``; ``kwargs`` reach every block, ``block_kwargs[l]`` only block ``l``."""
        for l, block in enumerate(self.blocks):
            y = self.run_block(block, y, **arguments_of(l, block_kwargs, kwargs))
        return y


LayerHistory = Literal["none", "dlcl"]
"""A layer history around a stack's blocks: none, or DLCL (Wang et al. 2019) as in the ODE
Transformer's released models (``learnable_dense``, pre-norm)."""
LAYER_HISTORIES: tuple[LayerHistory, ...] = typing.get_args(LayerHistory)


@dataclass(frozen=True)
class StackOptions:
    """Everything a stack builder may use besides the method, the fields and the depth.

    Args:
        coefficients: how blocks weigh their stages (methods without stage weights ignore it).
        d_model: feature width: needed by the gated coefficient schemes and by ``dlcl``'s norms.
        share_gate: one RK2 gate for the whole stack (the paper's code).
        iterations: fixed-point iterations of implicit blocks.
        norm_eps: epsilon of the norms a stack adds (``dlcl``, a layer history).
        history: ``"dlcl"`` wraps the blocks in a learned dense layer history (a ``DLCLStack``
            around them); only one-step methods (``HISTORY_FAMILIES``) can be wrapped.
    """

    coefficients: CoefficientScheme = "fixed"
    d_model: int | None = None
    share_gate: bool = False
    iterations: int = DEFAULT_ITERATIONS
    norm_eps: float = 1e-5
    history: LayerHistory = "none"

    def __post_init__(self) -> None:
        check_scheme(self.coefficients, list(COEFFICIENTS))
        if self.history not in LAYER_HISTORIES:
            raise ValueError(
                f"unknown layer history {self.history!r}; choose one of {LAYER_HISTORIES}"
            )
        if self.d_model is not None and self.d_model < 1:
            raise ValueError(f"d_model must be >= 1, got {self.d_model}")
        if not isinstance(self.iterations, int) or self.iterations < 0:
            raise ValueError(f"iterations must be a non-negative int, got {self.iterations!r}")
        if self.norm_eps <= 0:
            raise ValueError(f"norm_eps must be > 0, got {self.norm_eps}")


FieldFactory = Callable[[], nn.Module]
StackBuilder = Callable[[FieldFactory, int, StackOptions], Stack]
StackFamily = Literal[
    "runge_kutta", "multistep", "dlcl", "predictor_corrector", "implicit", "continuous"
]
STACK_FAMILIES: tuple[StackFamily, ...] = typing.get_args(StackFamily)


@dataclass(frozen=True)
class StackMethod:
    """One entry of ``STACK_METHODS``: its family, its builder and the coefficient schemes its
    blocks accept (``()``: the method has no stage weights, and the scheme is ignored)."""

    family: StackFamily
    build: StackBuilder
    schemes: tuple[CoefficientScheme, ...] = ()
    stages: int | None = None
    """Layer evaluations per block when fixed by the method alone (``None``: depends on
    options, e.g. implicit iterations)."""

    def __post_init__(self) -> None:
        if self.family not in STACK_FAMILIES:
            raise ValueError(
                f"unknown stack family {self.family!r}; choose one of {STACK_FAMILIES}"
            )
        unknown = [s for s in self.schemes if s not in COEFFICIENTS]
        if unknown:
            raise ValueError(f"unknown coefficient schemes {unknown}; known: {list(COEFFICIENTS)}")
        if self.stages is not None and self.stages < 1:
            raise ValueError(f"stages per block must be >= 1 or None, got {self.stages}")


def _build_runge_kutta(
    tableau: ButcherTableau, make_field: FieldFactory, num_layers: int, options: StackOptions
) -> Stack:
    scheme = options.coefficients if tableau.num_stages > 1 else "fixed"
    per_block: CoefficientScheme | Coefficients = scheme
    if scheme in GATED_SCHEMES and options.share_gate:
        per_block = make_coefficients(scheme, tableau, d_model=options.d_model)
    return RungeKuttaStack(
        [
            ODEBlock(make_field(), tableau, per_block, d_model=options.d_model)
            for _ in range(num_layers)
        ]
    )


def _build_adams_bashforth(
    order: int, make_field: FieldFactory, num_layers: int, options: StackOptions
) -> Stack:
    scheme = options.coefficients
    if scheme not in MULTISTEP_SCHEMES:
        raise ValueError(coefficient_problem(f"ab{order}", scheme))
    return AdamsBashforthStack([make_field() for _ in range(num_layers)], order, scheme)


def _build_dlcl(make_field: FieldFactory, num_layers: int, options: StackOptions) -> Stack:
    if options.d_model is None:
        raise ValueError("the dlcl stack needs d_model (the width of its per-layer norms)")
    fields = [make_field() for _ in range(num_layers)]
    return DLCLStack(fields, options.d_model, norm_eps=options.norm_eps)


def _build_predictor_corrector(
    make_field: FieldFactory, num_layers: int, options: StackOptions
) -> Stack:
    scheme = options.coefficients
    if scheme not in PC_SCHEMES:
        raise ValueError(coefficient_problem("pc", scheme))
    return RungeKuttaStack(
        [PredictorCorrectorBlock(make_field(), "rk2", scheme) for _ in range(num_layers)]
    )


def _build_implicit_euler(
    make_field: FieldFactory, num_layers: int, options: StackOptions
) -> Stack:
    return RungeKuttaStack(
        [ImplicitEulerBlock(make_field(), options.iterations) for _ in range(num_layers)]
    )


def _runge_kutta_method(tableau: ButcherTableau) -> StackMethod:
    schemes: tuple[CoefficientScheme, ...] = ()
    if tableau.num_stages == 2:
        schemes = tuple(COEFFICIENTS)
    elif tableau.num_stages > 2:
        schemes = ANY_STAGE_SCHEMES
    build = functools.partial(_build_runge_kutta, tableau)
    return StackMethod("runge_kutta", build, schemes, tableau.num_stages)


STACK_METHODS: dict[str, StackMethod] = {
    **{name: _runge_kutta_method(tableau) for name, tableau in TABLEAUS.items()},
    "ab2": StackMethod(
        "multistep", functools.partial(_build_adams_bashforth, 2), MULTISTEP_SCHEMES, 1
    ),
    "ab3": StackMethod(
        "multistep", functools.partial(_build_adams_bashforth, 3), MULTISTEP_SCHEMES, 1
    ),
    "dlcl": StackMethod("dlcl", _build_dlcl, (), 1),
    "pc": StackMethod("predictor_corrector", _build_predictor_corrector, PC_SCHEMES, 3),
    "implicit_euler": StackMethod("implicit", _build_implicit_euler, (), None),
}
"""Every method usable as ``encoder_method`` / ``decoder_method`` (see the module table)."""


def coefficient_problem(method: str, scheme: str) -> str:
    """Why coefficient ``scheme`` cannot be used with ``method`` — ``""`` when it can.

    A scheme the method does not list is an error; methods without stage weights (``euler``,
    ``dlcl``, ``implicit_euler``) accept and ignore every scheme.
    """
    spec = STACK_METHODS[method]
    if not spec.schemes or scheme in spec.schemes:
        return ""
    allowed = ", ".join(repr(s) for s in spec.schemes)
    if scheme in GATED_SCHEMES and spec.family == "runge_kutta":
        return (
            f"{scheme!r} needs a two-stage method, but {method!r} has {spec.stages} stages; "
            f"use {allowed}"
        )
    return f"{scheme!r} coefficients do not apply to method {method!r}; use {allowed}"


def build_stack(
    method: str,
    make_field: FieldFactory,
    num_layers: int,
    *,
    coefficients: CoefficientScheme = "fixed",
    d_model: int | None = None,
    share_gate: bool = False,
    iterations: int = DEFAULT_ITERATIONS,
    norm_eps: float = 1e-5,
    history: LayerHistory = "none",
) -> Stack:
    """``num_layers`` blocks of ``method``, each over a fresh field from ``make_field()``.

    Methods without stage weights (Euler, DLCL, implicit Euler) ignore ``coefficients``.
    ``share_gate=True`` gives every block of the stack the same RK2 gate (the paper's code);
    ``iterations`` sets the fixed-point iterations of ``implicit_euler``; ``norm_eps`` the
    epsilon of ``dlcl``'s per-layer norms.
    """
    if method not in STACK_METHODS:
        raise ValueError(f"unknown stack method {method!r}; choose one of {sorted(STACK_METHODS)}")
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    options = StackOptions(coefficients, d_model, share_gate, iterations, norm_eps, history)
    problem = coefficient_problem(method, coefficients) or history_problem(method, history)
    if problem:
        raise ValueError(problem)
    stack = STACK_METHODS[method].build(make_field, num_layers, options)
    if history == "none":
        return stack
    if d_model is None:
        raise ValueError("a dlcl layer history needs d_model (the width of its per-layer norms)")
    return DLCLStack((), d_model, norm_eps=norm_eps, blocks=list(stack.blocks))


HISTORY_FAMILIES: tuple[StackFamily, ...] = ("runge_kutta", "predictor_corrector", "implicit")
"""Stack families whose blocks need only ``y_l``, so a layer history can feed them its mix."""


def history_problem(method: str, history: str) -> str:
    """Why layer ``history`` cannot wrap ``method``'s blocks — ``""`` when it can."""
    if history == "none" or STACK_METHODS[method].family in HISTORY_FAMILIES:
        return ""
    wrappable = sorted(m for m, spec in STACK_METHODS.items() if spec.family in HISTORY_FAMILIES)
    return (
        f"a {history!r} layer history cannot wrap {method!r} blocks (they need more than their "
        f"input); use one of {wrappable}"
    )
