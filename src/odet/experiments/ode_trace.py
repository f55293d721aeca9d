"""Per-step numerical traces of training a continuous-depth (N-ODE) model.

:class:`SolveTracer` watches a model's :class:`~odet.blocks.continuous.ContinuousStack`\\ s with
forward hooks and, for every training step it is told about (:meth:`SolveTracer.record`),
writes one JSON line with what decides whether an adaptive solve stays well behaved:

- the solver's work: forward NFE per sample (mean, max), calls of the batched field, accepted and
  rejected steps, failed solves and their statuses; and backward evaluations (the field
  evaluations that backpropagation went through, counted by tensor hooks);
- the field's size: ``‖F(t0, y0)‖`` and ``‖F(t_end, y(t_end))‖`` per sample (norm over all
  ``T·D`` features, as the arclength's speed), and the state norms ``‖y0‖``, ``‖y(t_end)‖``;
- the field's weights: the spectral norm (largest singular value) and Frobenius norm of each of
  its linear layers;
- the optimisation: loss, cross-entropy, arclength, the gradient norm before clipping, whether
  loss, gradient and parameters are finite, and the forward and backward seconds.

Tracing does not change training: the extra field evaluations and weight reads run without
autograd, in eval mode (no dropout, no power-iteration update of a spectral norm) and with the
random-number state saved and restored, so a traced run takes the same steps as an untraced one.
"""

from __future__ import annotations

import gzip
import json
import math
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import torch
from torch import Tensor, nn

from odet.blocks.continuous import ContinuousStack
from odet.ode import SolveResult

__all__ = ["SolveTracer", "field_weight_norms", "first_nonfinite_step", "plot_traces", "read_trace"]


def field_weight_norms(field: nn.Module) -> dict[str, dict[str, float | None]]:
    """``{layer name: {"spectral": σ_max, "frobenius": ‖W‖_F}}`` of ``field``'s linear layers
    (the weights as the forward pass uses them, i.e. after any parametrisation); ``None``
    for a weight with non-finite entries."""
    out: dict[str, dict[str, float | None]] = {}
    with torch.no_grad():
        for name, module in field.named_modules():
            if isinstance(module, nn.Linear):
                weight = module.weight.detach().double()
                finite = bool(torch.isfinite(weight).all())
                out[name] = {
                    "spectral": float(torch.linalg.matrix_norm(weight, ord=2)) if finite else None,
                    "frobenius": float(torch.linalg.matrix_norm(weight)) if finite else None,
                }
    return out


@contextmanager
def _eval_mode(module: nn.Module) -> Iterator[None]:
    """``module`` in eval mode for a diagnostic look that must not change its state (dropout
    off; a spectral norm's power iteration does not advance)."""
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def _weight_norms(field: nn.Module) -> dict[str, dict[str, float | None]]:
    with _eval_mode(field):
        return field_weight_norms(field)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _per_sample_norm(x: Tensor) -> Tensor:
    return torch.linalg.vector_norm(x.reshape(x.shape[0], -1).double(), dim=1)


class SolveTracer:
    """Records solver, field and optimiser diagnostics of training steps as JSON lines.

    Use as ``with SolveTracer(model, path) as tracer:``; per step call :meth:`begin_step`
    before the forward pass, :meth:`mark_backward` before ``backward()``,
    :meth:`mark_gradients` after it and :meth:`record` once the gradient norm before clipping is
    known (before the optimiser step). Only the solves made between
    ``begin_step`` and ``mark_backward`` count (evaluation solves are ignored).
    """

    def __init__(self, model: nn.Module, path: str | Path) -> None:
        self.stacks = [m for m in model.modules() if isinstance(m, ContinuousStack)]
        if not self.stacks:
            raise ValueError("SolveTracer needs a model with a continuous encoder")
        self.path = Path(path)
        self._handles: list[Any] = []
        self._file: IO[str] | None = None
        self._active = False
        self._solves: list[dict[str, Any]] = []
        self._backward_calls = 0
        self._t_start = self._t_backward = self._t_gradients = 0.0
        self._gradients: tuple[int, float] = (0, 0.0)

    def __enter__(self) -> SolveTracer:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("w", encoding="utf-8")
        for index, stack in enumerate(self.stacks):
            self._handles.append(
                stack.register_forward_hook(self._solve_hook(index), with_kwargs=True)
            )
            self._handles.append(stack.field.register_forward_hook(self._field_hook))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._file is not None:
            self._file.close()
            self._file = None

    def begin_step(self) -> None:
        """A training step's forward pass starts."""
        self._active = True
        self._solves = []
        self._backward_calls = 0
        self._gradients = (0, 0.0)
        self._t_start = time.perf_counter()

    def mark_backward(self) -> None:
        """The forward pass is done; ``backward()`` comes next."""
        self._active = False
        self._t_backward = time.perf_counter()

    def mark_gradients(self, model: nn.Module) -> None:
        """``backward()`` is done: note the raw gradients (before any clipping)."""
        self._t_gradients = time.perf_counter()
        grads = [p.grad.detach() for p in model.parameters() if p.grad is not None]
        nonfinite = sum(int((~torch.isfinite(g)).sum()) for g in grads)
        self._gradients = (nonfinite, max((float(g.abs().max()) for g in grads), default=0.0))

    def _count_backward(self, grad: Tensor) -> None:
        self._backward_calls += 1

    def _field_hook(self, module: nn.Module, args: tuple[Any, ...], output: Tensor) -> None:
        if self._active and torch.is_grad_enabled() and output.requires_grad:
            output.register_hook(self._count_backward)

    def _solve_hook(self, index: int):
        def hook(
            module: ContinuousStack, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
        ) -> None:
            if not self._active or not isinstance(out, SolveResult):
                return
            y0 = args[0] if args else kwargs["y"]
            self._solves.append(self._describe_solve(index, module, y0, kwargs, out))

        return hook

    def _describe_solve(
        self,
        index: int,
        stack: ContinuousStack,
        y0: Tensor,
        kwargs: dict[str, Any],
        result: SolveResult,
    ) -> dict[str, Any]:
        mask = kwargs.get("padding_mask")
        keep = None if mask is None else (~mask).unsqueeze(-1).to(y0.dtype)
        stats = result.stats
        was_active, self._active = self._active, False
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=[]), _eval_mode(stack.field):
                t0 = y0.new_full((y0.shape[0],), stack.options.t0)
                f0 = stack.field(t0, y0.detach(), padding_mask=mask)
                f1 = stack.field(stats.t_final.to(y0.dtype), result.y.detach(), padding_mask=mask)
                if keep is not None:
                    f0, f1 = f0 * keep, f1 * keep
        finally:
            self._active = was_active
        nfe = stats.nfe.double()
        described = {
            "stack": index,
            "nfe_mean": float(nfe.mean()),
            "nfe_max": int(stats.nfe.max()),
            "nfe_total": stats.nfe_total,
            "accepted_mean": float(stats.accepted.double().mean()),
            "rejected_mean": float(stats.rejected.double().mean()),
            "rejected_max": int(stats.rejected.max()),
            "failed": len(stats.failed),
            "status": dict(Counter(s.value for s in stats.status)),
            "t_final_min": float(stats.t_final.min()),
            "f_norm_t0": _finite(float(_per_sample_norm(f0).mean())),
            "f_norm_t0_max": _finite(float(_per_sample_norm(f0).max())),
            "f_norm_end": _finite(float(_per_sample_norm(f1).mean())),
            "f_norm_end_max": _finite(float(_per_sample_norm(f1).max())),
            "y_norm_t0": _finite(float(_per_sample_norm(y0.detach()).mean())),
            "y_norm_end": _finite(float(_per_sample_norm(result.y.detach()).mean())),
            "arclength": None
            if stats.arclength is None
            else _finite(float(stats.arclength.detach().double().mean())),
        }
        return described

    def record(
        self,
        step: int,
        *,
        loss: Tensor,
        cross_entropy: Tensor,
        grad_norm: Tensor | float,
        model: nn.Module,
    ) -> dict[str, Any]:
        """Write the line of ``step`` (after ``backward()``, before the optimiser step)."""
        if self._file is None:
            raise RuntimeError("SolveTracer.record outside its `with` block")
        seconds_backward = self._t_gradients - self._t_backward
        grad_norm = float(grad_norm)
        params_finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
        weights = {
            f"{i}.{name}": norms
            for i, stack in enumerate(self.stacks)
            for name, norms in _weight_norms(stack.field).items()
        }
        spectral = [w["spectral"] for w in weights.values()]
        nonfinite, grad_max = self._gradients
        line = {
            "step": step,
            "loss": _finite(float(loss.detach())),
            "cross_entropy": _finite(float(cross_entropy.detach())),
            "loss_finite": bool(torch.isfinite(loss.detach())),
            "grad_norm": _finite(grad_norm),
            "grad_finite": math.isfinite(grad_norm),
            "grad_max_abs": _finite(grad_max),
            "grad_nonfinite_elements": nonfinite,
            "params_finite": params_finite,
            "weight_spectral_max": None if None in spectral else max(spectral),
            "weights": weights,
            "backward_nfe": self._backward_calls,
            "seconds_forward": self._t_backward - self._t_start,
            "seconds_backward": seconds_backward,
            "solves": self._solves,
        }
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()
        return line


@contextmanager
def maybe_trace(model: nn.Module, path: str | Path | None) -> Iterator[SolveTracer | None]:
    """A :class:`SolveTracer` writing ``path``, or ``None`` when ``path`` is ``None``."""
    if path is None:
        yield None
        return
    with SolveTracer(model, path) as tracer:
        yield tracer


def read_trace(path: str | Path) -> list[dict[str, Any]]:
    """The lines of a trace file written by :class:`SolveTracer` (gzipped if ``*.gz``)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


_PANELS: tuple[tuple[str, str, bool], ...] = (
    ("cross_entropy", "training cross-entropy", False),
    ("grad_norm", "gradient norm before clipping", True),
    ("weight_spectral_max", "largest spectral norm of the field's weights", False),
    ("y_norm_end", "‖y(t_end)‖ (state at the end)", True),
    ("f_norm_t0", "‖F(t0, y0)‖", True),
    ("f_norm_end", "‖F(t_end, y(t_end))‖", True),
    ("nfe_mean", "forward NFE per sample (mean)", False),
    ("rejected_mean", "rejected steps per sample (mean)", False),
    ("backward_nfe", "backward field evaluations", False),
)
"""The trace plot's panels: (key of a line or of its first solve, title, log scale)."""


def _series(lines: list[dict[str, Any]], key: str) -> list[float]:
    values = []
    for line in lines:
        value = line[key] if key in line else line["solves"][0].get(key)
        if not line["params_finite"]:
            value = None
        values.append(math.nan if value is None else float(value))
    return values


def first_nonfinite_step(lines: list[dict[str, Any]]) -> int | None:
    """The first step whose gradient norm (before clipping) was inf or NaN, if any."""
    return next((line["step"] for line in lines if not line["grad_finite"]), None)


def plot_traces(traces: dict[str, str | Path], out: str | Path, *, title: str = "") -> None:
    """One figure of :data:`_PANELS` over training steps, a line per trace (``label: path``);
    a dotted vertical line marks each trace's first non-finite gradient, and steps taken with
    non-finite parameters are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 3, figsize=(13, 9), dpi=80)
    for label, path in traces.items():
        lines = read_trace(path)
        steps = [line["step"] for line in lines]
        bad = first_nonfinite_step(lines)
        for ax, (key, _, _) in zip(axes.flat, _PANELS, strict=True):
            (drawn,) = ax.plot(steps, _series(lines, key), linewidth=1, label=label)
            if bad is not None:
                ax.axvline(bad, color=drawn.get_color(), linestyle=":", linewidth=1)
    for ax, (_, name, log) in zip(axes.flat, _PANELS, strict=True):
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("training step", fontsize=8)
        if log:
            ax.set_yscale("log")
        ax.tick_params(labelsize=7)
    axes.flat[0].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """``python -m odet.experiments.ode_trace OUT.png LABEL=TRACE.jsonl ... [--title T]``."""
    import argparse

    parser = argparse.ArgumentParser(description="plot SolveTracer traces side by side")
    parser.add_argument("out", help="the PNG to write")
    parser.add_argument("traces", nargs="+", metavar="LABEL=PATH", help="traces to plot")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    traces = {}
    for item in args.traces:
        label, sep, path = item.partition("=")
        if not sep:
            parser.error(f"expected LABEL=PATH, got {item!r}")
        traces[label] = path
    plot_traces(traces, args.out, title=args.title)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
