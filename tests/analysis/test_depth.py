"""``odet analyze RUN --depth-against REFERENCE``: per-sentence losses, rank statistics,
batching, the report of two runs, its files and its refusals."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from odet.analysis.depth import (
    DEPTH_FILES,
    binned_means,
    depth_vs_difficulty,
    length_batches,
    partial_spearman,
    ranks,
    score_sentences,
    sentence_losses,
    spearman,
)
from odet.cli import main
from odet.config import ConfigError
from odet.data import ParallelDataset, TokenizerPair
from odet.io import OUTPUT_MARKER
from odet.models import ContinuousEncoderConfig, Seq2Seq, Seq2SeqConfig
from tests.analysis.conftest import depth_data, depth_runs  # noqa: F401

PAD = 0


# ---------------------------------------------------------------------------- losses
def test_sentence_losses_are_the_mean_token_nll_of_a_loop_over_tokens():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7)
    target = torch.tensor([[4, 5, 6, 3, PAD], [6, 3, PAD, PAD, PAD], [1, 2, 3, 4, 5]])
    expected = []
    for b in range(3):
        nll = [
            -torch.log_softmax(logits[b, t], dim=-1)[target[b, t]]
            for t in range(5)
            if target[b, t] != PAD
        ]
        expected.append(sum(nll) / len(nll))
    got = sentence_losses(logits, target, PAD)
    assert got.shape == (3,)
    torch.testing.assert_close(got, torch.stack(expected))
    for b in range(3):  # and one sentence alone, cut before its padding, by F.cross_entropy
        n = int(target[b].ne(PAD).sum())
        alone = F.cross_entropy(logits[b, :n], target[b, :n])
        torch.testing.assert_close(got[b], alone)


def test_sentence_losses_refuse_a_target_of_only_padding():
    with pytest.raises(ValueError, match="not padding"):
        sentence_losses(torch.randn(2, 3, 5), torch.tensor([[4, 3, PAD], [PAD] * 3]), PAD)


# ---------------------------------------------------------------------------- statistics
def test_ranks_give_ties_their_average_rank():
    assert ranks([10, 20, 20, 5]).tolist() == [2.0, 3.5, 3.5, 1.0]
    assert ranks([7, 7, 7]).tolist() == [2.0, 2.0, 2.0]


def test_spearman_of_a_hand_computed_example():
    # ranks of y: 1, 2, 3.5, 5, 3.5; deviations from 3: x -2 -1 0 1 2, y -2 -1 .5 2 .5
    # r = (4 + 1 + 0 + 2 + 1) / sqrt(10 * 9.5)
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [4, 4, 4]) is None  # a constant side: undefined
    assert spearman([1, 2], [1, 2]) is None  # fewer than 3 values


def test_spearman_agrees_with_scipy_on_ties():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 6, 40), rng.integers(0, 4, 40) + rng.integers(0, 6, 40) // 2
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic)


def test_partial_spearman_is_the_correlation_of_rank_residuals():
    rng = np.random.default_rng(1)
    z = rng.normal(size=50)
    x, y = z + rng.normal(size=50), z + rng.normal(size=50)

    def residual(v):
        design = np.stack([np.ones(50), ranks(z)], axis=1)
        coef, *_ = np.linalg.lstsq(design, ranks(v), rcond=None)
        return ranks(v) - design @ coef

    expected = np.corrcoef(residual(x), residual(y))[0, 1]
    assert partial_spearman(x, y, z) == pytest.approx(expected)
    assert spearman(x, y) > partial_spearman(x, y, z)  # the shared z explained part of it
    assert partial_spearman(x, y, x) is None


def test_binned_means_per_value_and_per_equal_count_bin():
    x, y = [3, 1, 3, 2, 1], [10, 1, 20, 5, 3]
    assert binned_means(x, y) == [(1.0, 2, 2.0), (2.0, 1, 5.0), (3.0, 2, 15.0)]
    assert binned_means([5, 1, 4, 2, 3, 6], [50, 10, 40, 20, 30, 60], bins=3) == [
        (1.5, 2, 15.0),
        (3.5, 2, 35.0),
        (5.5, 2, 55.0),
    ]


# ---------------------------------------------------------------------------- batching
def test_length_batches_hold_one_source_length_within_the_budget():
    sources = np.array([3, 5, 3, 3, 5, 9, 3])
    targets = np.array([4, 2, 2, 6, 3, 1, 1])
    batches = length_batches(sources, targets, batch_tokens=6)
    assert sorted(i for b in batches for i in b.tolist()) == list(range(7))
    for batch in batches:
        assert len(set(sources[batch].tolist())) == 1
        assert len(batch) == 1 or len(batch) * sources[batch[0]] <= 6
        assert targets[batch].tolist() == sorted(targets[batch].tolist())
    assert [b.tolist() for b in batches] == [[6, 2], [0, 3], [1], [4], [5]]
    assert all(len(b) == 1 for b in length_batches(sources, targets, batch_tokens=1))


def _stiff_model() -> Seq2Seq:
    """A random continuous-encoder model whose NFE varies per sentence (weights doubled,
    tolerance 1e-4)."""
    torch.manual_seed(0)
    continuous = ContinuousEncoderConfig(rtol=1e-4, atol=1e-4, time_conditioning="film")
    config = Seq2SeqConfig(
        vocab_size=40,
        d_model=16,
        num_heads=2,
        ffn_dim=32,
        encoder_layers=2,
        decoder_layers=1,
        encoder_method="continuous",
        max_positions=32,
        continuous=continuous,
    )
    model = Seq2Seq(config).eval()
    with torch.no_grad():
        for p in model.encoder.parameters():
            p.mul_(2)
    return model


def test_batched_scores_equal_one_sentence_at_a_time(capsys):
    model = _stiff_model()
    rng = np.random.default_rng(0)
    lengths = [3, 5, 3, 7, 5, 3, 7, 5, 3, 4]
    dataset = ParallelDataset(
        [rng.integers(4, 40, n) for n in lengths],
        [rng.integers(4, 40, rng.integers(1, 6)) for _ in lengths],
    )
    nfe, loss = score_sentences(model, dataset, batch_tokens=4096)
    nfe1, loss1 = score_sentences(model, dataset, batch_tokens=1, progress=True, desc="one by one")
    err = capsys.readouterr().err  # the bar, in sentences
    assert "one by one: 100%" in err and "10/10" in err
    assert nfe is not None and nfe1 is not None
    assert len(set(nfe.tolist())) > 3, nfe  # depth does vary here
    assert nfe.tolist() == nfe1.tolist()  # per-sample step sizes: exactly the same depth
    np.testing.assert_allclose(loss, loss1, rtol=1e-4)  # same steps, step sizes within tolerance
    for i in (0, 3):  # and the loss of one sentence is that of its own forward pass
        src = torch.tensor([[*dataset[i][0].tolist(), model.config.eos_id]])
        tgt = dataset[i][1].tolist()
        tgt_in = torch.tensor([[model.config.bos_id, *tgt]])
        tgt_out = torch.tensor([[*tgt, model.config.eos_id]])
        with torch.no_grad():
            logits = model(src, tgt_in)
        assert loss[i] == pytest.approx(F.cross_entropy(logits[0], tgt_out[0]).item(), rel=1e-4)
    assert not model.training


def _continuous_model(**solver) -> Seq2Seq:
    torch.manual_seed(0)
    config = Seq2SeqConfig(
        vocab_size=40,
        d_model=16,
        num_heads=2,
        ffn_dim=32,
        encoder_method="continuous",
        continuous=ContinuousEncoderConfig(**solver),
    )
    return Seq2Seq(config).eval()


def _pairs(*lengths: int) -> ParallelDataset:
    rng = np.random.default_rng(2)
    return ParallelDataset(
        [rng.integers(4, 40, n) for n in lengths], [rng.integers(4, 40, 3) for _ in lengths]
    )


def test_a_batch_shared_solver_solves_each_sentence_alone():
    model = _continuous_model(backend="torchdiffeq", rtol=1e-5, atol=1e-5)
    dataset = _pairs(4, 4, 4, 4)
    nfe, _ = score_sentences(model, dataset)
    assert nfe is not None
    alone = []
    for i in range(4):
        src = torch.tensor([[*dataset[i][0].tolist(), model.config.eos_id]])
        with torch.no_grad():
            alone.append(int(model.encode(src).stats.nfe[0]))
    assert nfe.tolist() == alone


@pytest.mark.parametrize("on_failure", ["raise", "flag"])
def test_a_failed_solve_names_the_pairs(on_failure):
    model = _continuous_model(max_steps=1, on_failure=on_failure)
    with pytest.raises(FloatingPointError, match=r"solve failed on pair\(s\) \[1, 2\] \(0-based\)"):
        score_sentences(model, _pairs(5, 3, 3))  # the shorter sources come first


def test_a_discrete_encoder_has_no_nfe():
    model = Seq2Seq(Seq2SeqConfig(vocab_size=40, d_model=16, num_heads=2, ffn_dim=32)).train()
    dataset = ParallelDataset([np.array([5, 6]), np.array([7])], [np.array([8]), np.array([9])])
    nfe, loss = score_sentences(model, dataset)
    assert nfe is None and loss.shape == (2,)
    assert model.training  # the mode is restored


# ---------------------------------------------------------------------------- two runs
def test_depth_vs_difficulty_of_a_continuous_run_and_its_euler_twin(depth_runs):  # noqa: F811
    report = depth_vs_difficulty(depth_runs["node"], depth_runs["euler"])
    assert len(report) == 24 and report.split == "test" and report.same_tokenizers
    assert report.line_numbers.tolist() == list(range(1, 25))
    assert len(set(report.nfe.tolist())) > 1
    tokenizers = TokenizerPair.load(report.checkpoint)
    sources = Path(report.files[0]).read_text().splitlines()
    targets = Path(report.files[1]).read_text().splitlines()
    assert report.source_tokens.tolist() == [len(tokenizers.source.encode(s)) for s in sources]
    euler = Seq2Seq.from_pretrained(report.reference_checkpoint).eval()
    for i in (0, 23):
        src = torch.tensor([[*tokenizers.source.encode(sources[i]), euler.config.eos_id]])
        tgt = tokenizers.target.encode(targets[i])
        with torch.no_grad():
            logits = euler(src, torch.tensor([[euler.config.bos_id, *tgt]]))
        expected = F.cross_entropy(logits[0], torch.tensor([*tgt, euler.config.eos_id]))
        assert report.reference_loss[i] == pytest.approx(expected.item(), abs=1e-5)
    alone = depth_vs_difficulty(depth_runs["node"], depth_runs["euler"], batch_tokens=1)
    # Each sentence's NFE is its own; only the rounding of batched against one-row kernels
    # differs, which on some CPUs (AVX2 MKL) moves a solve by one dopri5 step (6 evaluations).
    moved = np.abs(alone.nfe - report.nfe)
    assert moved.max() <= 6 and (moved == 0).mean() >= 0.9
    np.testing.assert_allclose(alone.reference_loss, report.reference_loss, atol=1e-5)
    same = moved == 0  # a sentence solved in other steps has a slightly other encoding
    np.testing.assert_allclose(alone.loss[same], report.loss[same], atol=1e-5)
    np.testing.assert_allclose(alone.loss, report.loss, atol=1e-3)
    head = depth_vs_difficulty(depth_runs["node"], depth_runs["euler"], split="valid", limit=5)
    assert len(head) == 5 and head.files[0].endswith("valid.src")
    rho = report.correlations()
    assert rho["nfe_vs_source_tokens"] == pytest.approx(spearman(report.nfe, report.source_tokens))


def test_analyze_depth_writes_csv_json_and_plots(depth_runs, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "depth"
    argv = ["analyze", str(depth_runs["node"]), "--depth-against", str(depth_runs["euler"])]
    argv += ["--out", str(out), "--limit", "20", "--batch-tokens", "64"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "20 test sentences: NFE mean" in printed and "Spearman: NFE vs source length" in printed
    assert {p.name for p in out.iterdir()} == {*DEPTH_FILES, OUTPUT_MARKER}
    with open(out / "depth.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["index", "line", "source_tokens", "nfe", "reference_loss", "loss"]
    assert [int(r["index"]) for r in rows] == list(range(20))
    report = depth_vs_difficulty(depth_runs["node"], depth_runs["euler"], limit=20)
    assert [int(r["nfe"]) for r in rows] == report.nfe.tolist()
    assert [int(r["source_tokens"]) for r in rows] == report.source_tokens.tolist()
    np.testing.assert_allclose([float(r["loss"]) for r in rows], report.loss, atol=1e-5)
    summary = json.loads((out / "depth.json").read_text())
    assert summary["command"] == (
        f"odet analyze {depth_runs['node']} --depth-against {depth_runs['euler']} --out {out} "
        "--split test --batch-tokens 64 --limit 20"
    )
    nfe = np.array([int(r["nfe"]) for r in rows])
    reference_loss = np.array([float(r["reference_loss"]) for r in rows])
    assert summary["sentences"] == 20
    assert summary["nfe"] == {
        "mean": pytest.approx(nfe.mean()),
        "std": pytest.approx(nfe.std()),
        "min": nfe.min(),
        "max": nfe.max(),
    }
    rho = summary["spearman"]
    assert rho["nfe_vs_reference_loss"] == pytest.approx(spearman(nfe, reference_loss))
    assert rho["nfe_vs_reference_loss_given_length"] == pytest.approx(
        partial_spearman(nfe, reference_loss, [int(r["source_tokens"]) for r in rows])
    )
    assert sum(b["sentences"] for b in summary["nfe_by_length"]) == 20
    assert len(summary["nfe_by_difficulty"]) == 10
    for png in ("nfe_vs_length.png", "nfe_vs_difficulty.png"):
        assert (out / png).stat().st_size > 1000
    assert main(argv) == 0  # odet's own output directory may be written again


# ---------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    ("run", "reference", "options", "message"),
    [
        ("euler", "euler", {}, r"'euler' encoder, whose depth is the same for every sentence"),
        ("fixed", "euler", {}, r"fixed_steps=2: every sentence gets the same NFE"),
        ("node", "other-test", {}, r"reads data\.test from .*valid\.src.*other sentences"),
        ("node", "no-test", {}, r"no-test names no data\.test files; try --split valid"),
        ("node", "euler", {"limit": 0}, r"--limit must be >= 1, got 0"),
        ("node", "euler", {"batch_tokens": 0}, r"--batch-tokens must be >= 1, got 0"),
        ("node", "euler", {"split": "train"}, r"--split must be test or valid"),
    ],
)
def test_depth_vs_difficulty_refuses(depth_runs, run, reference, options, message):  # noqa: F811
    with pytest.raises(ConfigError, match=message):
        depth_vs_difficulty(depth_runs[run], depth_runs[reference], **options)


def test_a_model_directory_without_its_training_config_is_refused(depth_runs, tmp_path):  # noqa: F811
    model = Seq2Seq.from_pretrained(_best(depth_runs["node"]))
    model.save_pretrained(tmp_path / "bare")
    with pytest.raises(ConfigError, match=r"bare has no train_config\.yaml"):
        depth_vs_difficulty(tmp_path / "bare", depth_runs["euler"])


def _best(run: Path) -> Path:
    index = json.loads((run / "checkpoints" / "index.json").read_text())
    return run / "checkpoints" / (index["best"] or index["last"])
