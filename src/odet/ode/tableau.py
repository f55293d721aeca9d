"""Explicit Runge–Kutta methods as data: a validated Butcher tableau and a registry of them.

A tableau ``(a, b, c)`` defines one step of ``y' = f(t, y)``::

    k_i    = f(t + c_i h, y + h Σ_j a_ij k_j)      (j < i: explicit)
    y_next = y + h Σ_i b_i k_i

Every tableau checks itself on construction: ``a`` strictly lower-triangular, each row of ``a``
summing to ``c``, and the Butcher order conditions (one per rooted tree) up to its declared
``order`` — so ``b`` summing to one is the first of them. Embedded pairs carry error weights
``b_error = b − b̂`` (summing to zero) whose lower-order solution ``b̂`` is checked likewise.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

_TOL = 1e-9

Tree = tuple["Tree", ...]
"""A rooted tree as the sorted tuple of its children's subtrees; ``()`` is the single node."""


@functools.cache
def _forests(size: int) -> frozenset[Tree]:
    """All multisets of rooted trees with ``size`` nodes in total, as sorted tuples."""
    if size == 0:
        return frozenset({()})
    out = set()
    for first in range(1, size + 1):
        for tree in rooted_trees(first):
            for rest in _forests(size - first):
                out.add(tuple(sorted((tree, *rest))))
    return frozenset(out)


@functools.cache
def rooted_trees(order: int) -> tuple[Tree, ...]:
    """The rooted trees with ``order`` nodes (1, 1, 2, 4, 9, 20, … of them)."""
    if order < 1:
        raise ValueError(f"tree order must be >= 1, got {order}")
    return tuple(sorted(_forests(order - 1)))


def _tree_order(tree: Tree) -> int:
    return 1 + sum(_tree_order(child) for child in tree)


def _tree_density(tree: Tree) -> int:
    """γ(t) = |t| · Π γ(children): the order condition of t is Σ b_i Φ_i(t) = 1/γ(t)."""
    return _tree_order(tree) * math.prod(_tree_density(child) for child in tree)


def _elementary_weights(tree: Tree, a: Sequence[Sequence[float]]) -> list[float]:
    """Φ_i(t) for each stage i: the product over children u of Σ_j a_ij Φ_j(u)."""
    s = len(a)
    phi = [1.0] * s
    for child in tree:
        child_phi = _elementary_weights(child, a)
        for i in range(s):
            phi[i] *= sum(a[i][j] * child_phi[j] for j in range(s))
    return phi


def _order_violation(a: Sequence[Sequence[float]], weights: Sequence[float], order: int) -> str:
    """The first order condition (up to ``order``) that ``weights`` break, or ``""``."""
    for p in range(1, order + 1):
        for tree in rooted_trees(p):
            value = sum(w * phi for w, phi in zip(weights, _elementary_weights(tree, a)))
            target = 1.0 / _tree_density(tree)
            if abs(value - target) > _TOL:
                return f"order-{p} condition for tree {tree!r}: Σ b·Φ = {value:.6g} ≠ {target:.6g}"
    return ""


def _as_matrix(a: Sequence[Sequence[float]]) -> tuple[tuple[float, ...], ...]:
    """Normalise ``a`` to a square tuple matrix; accepts square rows or ragged lower rows."""
    s = len(a)
    rows = []
    for i, row in enumerate(a):
        row = tuple(float(x) for x in row)
        if len(row) < s:
            row = row + (0.0,) * (s - len(row))
        if len(row) != s:
            raise ValueError(f"tableau row {i} of a has {len(row)} entries; expected at most {s}")
        rows.append(row)
    return tuple(rows)


@dataclass(frozen=True)
class ButcherTableau:
    """An explicit Runge–Kutta method (frozen and self-validating).

    Args:
        a: stage coefficients, ``s × s`` strictly lower-triangular (ragged lower rows accepted).
        b: solution weights, length ``s``.
        c: nodes, length ``s``; ``c_i = Σ_j a_ij``.
        order: the order of the ``b`` solution; its order conditions are verified.
        b_error: for embedded pairs, ``b − b̂`` (the error estimate weights; they sum to 0).
        embedded_order: order of the embedded solution ``b̂ = b − b_error``.
        name: a display name.
    """

    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    c: tuple[float, ...]
    order: int
    b_error: tuple[float, ...] | None = None
    embedded_order: int | None = None
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        a = _as_matrix(self.a)
        b = tuple(float(x) for x in self.b)
        c = tuple(float(x) for x in self.c)
        b_error = None if self.b_error is None else tuple(float(x) for x in self.b_error)
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", b)
        object.__setattr__(self, "c", c)
        object.__setattr__(self, "b_error", b_error)

        s = len(a)
        label = f"tableau {self.name!r}" if self.name else "tableau"
        if s == 0:
            raise ValueError(f"{label}: needs at least one stage")
        if len(b) != s or len(c) != s:
            raise ValueError(f"{label}: a has {s} stages but b has {len(b)} and c has {len(c)}")
        for i in range(s):
            if any(a[i][j] != 0.0 for j in range(i, s)):
                raise ValueError(f"{label}: a must be strictly lower-triangular (row {i})")
            if abs(sum(a[i]) - c[i]) > _TOL:
                raise ValueError(f"{label}: row {i} of a sums to {sum(a[i]):.6g}, not c={c[i]:.6g}")
        if abs(sum(b) - 1.0) > _TOL:
            raise ValueError(f"{label}: b must sum to 1 (consistency), sums to {sum(b):.6g}")
        if not isinstance(self.order, int) or self.order < 1:
            raise ValueError(f"{label}: order must be a positive int, got {self.order!r}")
        broken = _order_violation(a, b, self.order)
        if broken:
            raise ValueError(f"{label}: declared order {self.order} but {broken}")
        if (b_error is None) != (self.embedded_order is None):
            raise ValueError(f"{label}: b_error and embedded_order must be given together")
        if b_error is not None and self.embedded_order is not None:
            if len(b_error) != s:
                raise ValueError(f"{label}: b_error has {len(b_error)} entries, expected {s}")
            if abs(sum(b_error)) > _TOL:
                raise ValueError(f"{label}: b_error must sum to 0, sums to {sum(b_error):.6g}")
            b_hat = [bi - ei for bi, ei in zip(b, b_error)]
            broken = _order_violation(a, b_hat, self.embedded_order)
            if broken:
                raise ValueError(f"{label}: embedded solution b − b_error: {broken}")

    @property
    def num_stages(self) -> int:
        return len(self.b)

    @property
    def is_embedded(self) -> bool:
        """Whether the tableau carries an error estimate (for adaptive step control)."""
        return self.b_error is not None

    @property
    def fsal(self) -> bool:
        """First-same-as-last: the last stage is evaluated at the step's solution."""
        return self.c[-1] == 1.0 and self.a[-1][:-1] == self.b[:-1] and self.b[-1] == 0.0


EULER = ButcherTableau(a=((),), b=(1,), c=(0,), order=1, name="euler")
MIDPOINT = ButcherTableau(a=((), (1 / 2,)), b=(0, 1), c=(0, 1 / 2), order=2, name="midpoint")
HEUN = ButcherTableau(a=((), (1,)), b=(1 / 2, 1 / 2), c=(0, 1), order=2, name="heun")
RALSTON = ButcherTableau(a=((), (2 / 3,)), b=(1 / 4, 3 / 4), c=(0, 2 / 3), order=2, name="ralston")
RK3 = ButcherTableau(
    a=((), (1 / 2,), (-1, 2)), b=(1 / 6, 2 / 3, 1 / 6), c=(0, 1 / 2, 1), order=3, name="rk3"
)
RK4 = ButcherTableau(
    a=((), (1 / 2,), (0, 1 / 2), (0, 0, 1)),
    b=(1 / 6, 1 / 3, 1 / 3, 1 / 6),
    c=(0, 1 / 2, 1 / 2, 1),
    order=4,
    name="rk4",
)
RK38 = ButcherTableau(
    a=((), (1 / 3,), (-1 / 3, 1), (1, -1, 1)),
    b=(1 / 8, 3 / 8, 3 / 8, 1 / 8),
    c=(0, 1 / 3, 2 / 3, 1),
    order=4,
    name="rk38",
)
BOSH3 = ButcherTableau(
    a=((), (1 / 2,), (0, 3 / 4), (2 / 9, 1 / 3, 4 / 9)),
    b=(2 / 9, 1 / 3, 4 / 9, 0),
    c=(0, 1 / 2, 3 / 4, 1),
    order=3,
    b_error=(2 / 9 - 7 / 24, 1 / 3 - 1 / 4, 4 / 9 - 1 / 3, -1 / 8),
    embedded_order=2,
    name="bosh3",
)
_DOPRI5_B = (35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0)
_DOPRI5_B_HAT = (5179 / 57600, 0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40)
DOPRI5 = ButcherTableau(
    a=(
        (),
        (1 / 5,),
        (3 / 40, 9 / 40),
        (44 / 45, -56 / 15, 32 / 9),
        (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
        (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
        _DOPRI5_B[:6],
    ),
    b=_DOPRI5_B,
    c=(0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1, 1),
    order=5,
    b_error=tuple(x - y for x, y in zip(_DOPRI5_B, _DOPRI5_B_HAT)),
    embedded_order=4,
    name="dopri5",
)

TABLEAUS: dict[str, ButcherTableau] = {
    "euler": EULER,
    "midpoint": MIDPOINT,
    "heun": HEUN,
    "rk2": HEUN,
    "ralston": RALSTON,
    "rk3": RK3,
    "rk4": RK4,
    "rk38": RK38,
    "bosh3": BOSH3,
    "dopri5": DOPRI5,
}
"""Explicit methods by name. ``rk2`` is the ODE Transformer's RK2 (Heun: k2 = F(y + k1))."""


def get_tableau(method: str | ButcherTableau) -> ButcherTableau:
    """Resolve a method name (or pass a tableau through); unknown names list the choices."""
    if isinstance(method, ButcherTableau):
        return method
    try:
        return TABLEAUS[method]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown Runge–Kutta method {method!r}; choose one of {sorted(TABLEAUS)}"
        ) from None
