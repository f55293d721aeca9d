"""Copy the table's finished runs into the experiment's layout:
``python import_runs.py SRC DEST`` (``SRC/<variant>-seed<k>`` → ``DEST/<variant>/seed<k>``).

The runs were trained before ``optim.decay_embeddings`` and ``model.scaled_residual_init``
existed, with the behaviour of both set to ``false``; the copies' ``config.yaml`` states that,
so ``odet experiment configs/experiments/tinyshakespeare_methods.yaml`` reuses them.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import yaml


def main(src: Path, dest: Path) -> None:
    for summary in sorted(src.glob("*-seed*/summary.json")):
        variant, seed = summary.parent.name.rsplit("-seed", 1)
        target = dest / variant / f"seed{seed}"
        if target.exists():
            continue
        shutil.copytree(summary.parent, target)
        path = target / "config.yaml"
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
        config["optim"].setdefault("decay_embeddings", False)
        config["model"].setdefault("scaled_residual_init", False)
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        print(f"{summary.parent} -> {target}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
