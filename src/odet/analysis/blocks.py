"""What each block of a trained model does: its coefficients and the size of its update.

Two views from the ODE Transformer paper's analysis:

- **coefficients**: the stage weights each block uses — fixed, learned or EMA weights, and for
  gated RK2 the mean gate ``g`` over the positions of a batch (``y' = y + g·k1 + (1 − g)·k2``);
  the trainer logs them at every validation, so they can be followed over training;
- **update sizes**: ``‖y_{l+1} − y_l‖ / ‖y_l‖`` per block, averaged over real tokens — the
  "truncation error" view: how far each block moves the representation.

Measurements use forward hooks on the blocks of a model in eval mode; they never change what
the model computes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from odet.blocks import Coefficients, DLCLStack, FixedCoefficients, GatedCoefficients, Stack
from odet.models import Seq2Seq


def _stacks(model: Seq2Seq) -> dict[str, Stack]:
    """The model's discrete stacks (a continuous encoder has no blocks to inspect)."""
    stacks = {"encoder": model.encoder, "decoder": model.decoder}
    return {name: stack for name, stack in stacks.items() if isinstance(stack, Stack)}


@contextmanager
def _recording(modules: list[nn.Module], store: list[Any], fn: Any) -> Iterator[None]:
    handles = [
        m.register_forward_hook(lambda mod, args, out, i=i: store.append((i, fn(args, out))))
        for i, m in enumerate(modules)
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _first_tensor(value: Any) -> Tensor:
    return value[0] if isinstance(value, tuple) else value


GateStats = dict[str, float]


@torch.no_grad()
def gate_statistics(
    model: Seq2Seq, src: Tensor, tgt_in: Tensor, *, threshold: float = 0.01
) -> dict[str, list[GateStats | None]]:
    """Per stack, per block: how the gated RK2 gate ``g`` behaves over the real tokens of a
    teacher-forced pass (``None`` for blocks without a gate).

    ``mean`` and ``std`` of ``g``; ``saturated``, the fraction of tokens with ``g < threshold``
    or ``g > 1 − threshold`` (there the block uses one stage alone and the other gets almost no
    gradient); ``logit_rms``, the root mean square of ``W [k1; k2] + b``.
    """
    gated: dict[str, list[GatedCoefficients | None]] = {}
    for name, stack in _stacks(model).items():
        gated[name] = []
        for block in stack.blocks:
            coefficients = next((m for m in block.modules() if isinstance(m, Coefficients)), None)
            is_gated = isinstance(coefficients, GatedCoefficients)
            gated[name].append(coefficients if is_gated else None)
    modules = list({id(c.gate): c.gate for rows in gated.values() for c in rows if c}.values())
    if not modules:
        return {name: [None] * len(rows) for name, rows in gated.items()}
    calls: list[tuple[int, Tensor]] = []
    was_training = model.training
    model.eval()
    with _recording(modules, calls, lambda args, out: out.detach()[..., 0]):
        model(src, tgt_in)
    model.train(was_training)
    # A gate shared by several blocks (``share_gate``) is called once per block, in block order.
    queues: dict[int, list[Tensor]] = {}
    for index, logits in calls:
        queues.setdefault(index, []).append(logits)
    masks = {"encoder": src.ne(model.config.pad_id), "decoder": tgt_in.ne(model.config.pad_id)}
    positions = {id(m): i for i, m in enumerate(modules)}
    stats: dict[str, list[GateStats | None]] = {}
    for name, rows in gated.items():
        stats[name] = []
        for coefficients in rows:
            if coefficients is None:
                stats[name].append(None)
                continue
            logits = queues[positions[id(coefficients.gate)]].pop(0)[masks[name]].double()
            g = torch.sigmoid(logits)
            stats[name].append(
                {
                    "mean": g.mean().item(),
                    "std": g.std(correction=0).item(),
                    "saturated": ((g < threshold) | (g > 1 - threshold)).double().mean().item(),
                    "logit_rms": logits.square().mean().sqrt().item(),
                }
            )
    return stats


def has_learned_coefficients(model: nn.Module) -> bool:
    """Whether any block weights change in training: learned, gated or EMA stage weights, or a
    DLCL layer combination."""
    return any(
        isinstance(m, DLCLStack)
        or (isinstance(m, Coefficients) and not isinstance(m, FixedCoefficients))
        for m in model.modules()
    )


@torch.no_grad()
def coefficient_snapshot(
    model: Seq2Seq, src: Tensor | None = None, tgt_in: Tensor | None = None
) -> dict[str, list[list[float]]]:
    """Per stack, per block: the block's weights, ``[]`` when it has none.

    A block's row lists the weights of each of its coefficient modules in order: the stage
    weights, or ``[mean g]`` for gated RK2 over the real positions of ``src``/``tgt_in``; a
    predictor–corrector block gives its predictor weights ``w`` then its corrector weights
    ``γ``. A DLCL stack adds ``"<stack>_layers"``: the rows ``W[l, :l+1]`` of its layer
    combination (row ``l`` is the input of block ``l + 1``, the last row the stack's output).
    """
    gates: dict[str, list[GateStats | None]] = {}
    if src is not None and tgt_in is not None:
        gates = gate_statistics(model, src, tgt_in)
    snapshot: dict[str, list[list[float]]] = {}
    for name, stack in _stacks(model).items():
        rows: list[list[float]] = []
        for index, block in enumerate(stack.blocks):
            row: list[float] = []
            for coefficients in (m for m in block.modules() if isinstance(m, Coefficients)):
                if isinstance(coefficients, GatedCoefficients):
                    stats = gates[name][index] if gates else None
                    row.extend([stats["mean"]] if stats else [])
                elif (weights := coefficients.weights()) is not None:
                    row.extend(float(w) for w in weights)
            rows.append(row)
        snapshot[name] = rows
        if isinstance(stack, DLCLStack):
            dense = stack.combination_weights()
            snapshot[f"{name}_layers"] = [row[: l + 1].tolist() for l, row in enumerate(dense)]
    return snapshot


@torch.no_grad()
def update_sizes(model: Seq2Seq, src: Tensor, tgt_in: Tensor) -> dict[str, list[float]]:
    """Per stack, per block: mean over real tokens of ``‖output − input‖ / ‖input‖``."""
    was_training = model.training
    model.eval()
    results: dict[str, list[float]] = {}
    pad = model.config.pad_id
    masks = {"encoder": src.ne(model.config.pad_id), "decoder": tgt_in.ne(pad)}
    for name, stack in _stacks(model).items():
        records: list[tuple[int, float]] = []
        mask = masks[name]

        def measure(args: tuple[Any, ...], out: Any, mask: Tensor = mask) -> float:
            before, after = args[0], _first_tensor(out)
            ratio = (after - before).norm(dim=-1) / before.norm(dim=-1).clamp_min(1e-12)
            return ratio[mask].mean().item()

        with _recording(list(stack.blocks), records, measure):
            model(src, tgt_in)
        results[name] = [value for _, value in sorted(records)]
    model.train(was_training)
    return results


def _batch(model: Seq2Seq, tokenizers: Any, sources: list[str], targets: list[str]) -> Any:
    from odet.data import ParallelDataset

    dataset = ParallelDataset.from_texts(sources, targets, tokenizers)
    limit = model.config.max_positions - 1
    clipped = ParallelDataset(
        [dataset[i][0][:limit] for i in range(len(dataset))],
        [dataset[i][1][:limit] for i in range(len(dataset))],
    )
    return clipped.batch(list(range(len(clipped))))


def analyze_runs(runs: list[str], out: str, *, sentences: int = 64) -> dict[str, Any]:
    """``odet analyze``: update sizes, coefficients and gate statistics of each run's best
    checkpoint on its first ``sentences`` validation pairs (text or JSON Lines data), and the
    coefficients logged over training; writes ``analysis.json``, ``update_sizes.png`` and
    ``coefficients.png`` to ``out``, and ``layer_weights.png`` when a run has a DLCL stack."""
    import json
    from pathlib import Path

    from odet.data import TokenizerPair
    from odet.training import load_train_config, resolve_model_dir
    from odet.training.metrics import MetricsLog
    from odet.training.trainer import read_split

    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    names = [Path(run).name for run in runs]
    unique = len(set(names)) == len(names)
    for run in runs:
        run_dir = Path(run)
        label = run_dir.name if unique else f"{run_dir.parent.name}/{run_dir.name}"
        model_dir = resolve_model_dir(run_dir, "best")
        model = Seq2Seq.from_pretrained(model_dir).eval()
        tokenizers = TokenizerPair.load(model_dir)
        config = load_train_config(model_dir / "train_config.yaml")
        pairs = read_split(config.data, config.data.valid or config.data.train).head(sentences)
        batch = _batch(model, tokenizers, list(pairs.source), list(pairs.target))
        history = [
            r for r in MetricsLog(run_dir / "metrics.jsonl").read() if r["event"] == "coefficients"
        ]
        report[label] = {
            "checkpoint": str(model_dir),
            "encoder_method": model.config.encoder_method,
            "decoder_method": model.config.decoder_method,
            "update_sizes": update_sizes(model, batch.src, batch.tgt_in),
            "coefficients": coefficient_snapshot(model, batch.src, batch.tgt_in),
            "gates": gate_statistics(model, batch.src, batch.tgt_in),
            "coefficient_history": history,
        }
    (out_dir / "analysis.json").write_text(json.dumps(report, indent=2) + "\n")
    _plot_update_sizes(report, out_dir / "update_sizes.png")
    _plot_coefficients(report, out_dir / "coefficients.png")
    _plot_layer_weights(report, out_dir / "layer_weights.png")
    return report


def _plot_update_sizes(report: dict[str, Any], path: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, entry in report.items():
        for ax, stack in zip(axes, ("encoder", "decoder")):
            sizes = entry["update_sizes"][stack]
            label = f"{name} ({entry[f'{stack}_method']})"
            ax.plot(range(1, len(sizes) + 1), sizes, "o-", label=label)
    for ax, stack in zip(axes, ("encoder", "decoder")):
        ylabel = r"$\|y_{l+1} - y_l\| \,/\, \|y_l\|$"
        ax.set(xlabel=f"{stack} block", ylabel=ylabel, title=stack)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_coefficients(report: dict[str, Any], path: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    plotted = False
    for name, entry in report.items():
        history = entry["coefficient_history"]
        for stack in ("encoder", "decoder"):
            blocks = [r[stack] for r in history]
            steps = [r["step"] for r in history]
            for b in range(len(blocks[0]) if blocks else 0):
                series = [row[b][0] for row in blocks if row[b]]
                if len(series) == len(steps) and series and max(series) > min(series):
                    ax.plot(steps, series, "o-", ms=3, label=f"{name} {stack} block {b + 1}")
                    plotted = True
    ax.set(xlabel="update", ylabel="gate mean g / first stage weight")
    ax.grid(alpha=0.3)
    if plotted:
        ax.legend(fontsize=7)
    else:
        ax.text(
            0.5, 0.5, "no learned coefficients in these runs", ha="center", transform=ax.transAxes
        )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_layer_weights(report: dict[str, Any], path: Any) -> None:
    """The learned DLCL combinations ``W`` (one heat map per DLCL stack); nothing without one."""
    panels = [
        (f"{name} {key.removesuffix('_layers')}", rows)
        for name, entry in report.items()
        for key, rows in entry["coefficients"].items()
        if key.endswith("_layers")
    ]
    if not panels:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    for ax, (title, rows) in zip(axes[0], panels):
        dense = np.full((len(rows), len(rows)), np.nan)
        for l, row in enumerate(rows):
            dense[l, : len(row)] = row
        image = ax.imshow(dense, cmap="viridis")
        low, high = np.nanmin(dense), np.nanmax(dense)
        for (l, k), value in np.ndenumerate(dense):
            if not np.isnan(value):
                light = high > low and (value - low) / (high - low) > 0.6
                color = "k" if light else "w"
                ax.text(k, l, f"{value:.2f}", ha="center", va="center", fontsize=7, color=color)
        labels = ["emb", *(f"y{k}" for k in range(1, len(rows)))]
        ax.set_xticks(range(len(rows)), labels)
        ax.set_yticks(range(len(rows)), [*(f"in {l + 1}" for l in range(len(rows) - 1)), "out"])
        ax.set_title(f"{title}: W[l, k]", fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
