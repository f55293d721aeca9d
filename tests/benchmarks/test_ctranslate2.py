"""The CTranslate2 benchmark peer (skipped without ``ctranslate2``) and the runner's options."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import runner, systems

EOS, PAD, TOY = systems.EOS, systems.PAD, systems.SIZES["toy"]
gen_sources = systems.gen_sources


def test_runner_accepts_the_ctranslate2_systems_and_threads() -> None:
    args = runner.parse_args(
        ["--quick", "--generate", "ct2-marian", "ct2-marian-int8", "hf-marian", "--threads", "1"]
    )
    assert args.generate == ["ct2-marian", "ct2-marian-int8", "hf-marian"] and args.threads == 1
    for bad in (["--generate", "ct2-marian-fp16"], ["--threads", "0"]):
        with pytest.raises(SystemExit):
            runner.parse_args(["--quick", *bad])


def test_missing_ctranslate2_is_a_skipped_peer(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    monkeypatch.setattr(systems, "_CT2_MODELS", {})
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "ctranslate2.converters.transformers", None)
    with pytest.raises(systems.PeerUnavailableError, match="ctranslate2"):
        systems.GEN_SYSTEMS["ct2-marian"](TOY)


@pytest.mark.parametrize("name", ["ct2-marian", "ct2-marian-int8"])
@pytest.mark.parametrize("beam", [1, 5])
def test_ctranslate2_peer_decodes_exactly_the_forced_number_of_tokens(name: str, beam: int) -> None:
    pytest.importorskip("ctranslate2")
    pytest.importorskip("transformers")
    src = gen_sources(TOY)
    out = systems.GEN_SYSTEMS[name](TOY)(src, beam)
    assert len(out) == TOY.gen_batch
    assert {len(tokens) for tokens in out} == {TOY.gen_tokens}
    assert all(0 <= t < TOY.vocab_size - 1 and t != EOS for tokens in out for t in tokens)


def test_converted_model_scores_like_the_hf_marian_it_came_from() -> None:
    """Same weights: CTranslate2's token log-probabilities equal HF's (decoder started from
    Marian's zero embedding, the <pad> row CTranslate2 drops left out of the softmax)."""
    pytest.importorskip("ctranslate2")
    pytest.importorskip("transformers")
    src = gen_sources(TOY)[:3]
    tgt = gen_sources(TOY, seed=5)[:3, :5]
    vocab = systems.ct2_vocabulary(TOY)
    translator = systems.ct2_translator(TOY, "float32", threads=1)
    scored = translator.score_batch(
        [[vocab[i] for i in row] for row in src.tolist()],
        [[vocab[i] for i in row] for row in tgt.tolist()],
    )
    ct2 = torch.tensor([r.log_probs for r in scored])
    model = systems.marian_model(TOY).eval()
    with torch.no_grad():
        logits = model(
            input_ids=src,
            attention_mask=src.ne(PAD),
            decoder_input_ids=torch.cat([torch.full((3, 1), PAD), tgt], dim=1),
        ).logits
    targets = torch.cat([tgt, torch.full((3, 1), EOS)], dim=1)
    hf = logits[..., :-1].log_softmax(-1).gather(2, targets.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(ct2, hf, atol=1e-4, rtol=1e-4)


def test_runner_times_ctranslate2_in_the_same_rounds_as_hf(tmp_path: Path) -> None:
    pytest.importorskip("ctranslate2")
    pytest.importorskip("transformers")
    out = tmp_path / "r.json"
    argv = ["--quick", "--rounds", "1", "--no-training", "--beams", "1", "--threads", "1",
            "--generate", "hf-marian", "ct2-marian", "--out", str(out)]  # fmt: skip
    threads = torch.get_num_threads()
    try:
        assert runner.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    results = json.loads(out.read_text())
    greedy = results["sizes"]["toy"]["generation"]["greedy"]
    assert greedy["ct2-marian"]["sentences_per_s"] > 0
    assert greedy["ct2-marian"]["speed_vs_hf-marian"] > 0
    assert results["environment"]["versions"]["ctranslate2"]
    assert results["environment"]["torch_threads"] == 1


def test_profile_decode_writes_its_tables(tmp_path: Path) -> None:
    from benchmarks import profile_decode

    out = tmp_path / "p.md"
    threads = torch.get_num_threads()
    try:
        argv = ["--sizes", "toy", "--dtypes", "fp32", "--repeats", "1", "--out", str(out)]
        assert profile_decode.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    text = out.read_text()
    assert "Top 20 ops by self CPU time" in text and "| decoder.step |" in text
    (profile,) = json.loads(out.with_suffix(".json").read_text())["profiles"]
    assert profile["steps"] == TOY.gen_tokens + 1
    summary = profile["summary"]
    assert 0 < summary["matmul_share"] < 1 and summary["aten_calls_per_step_from_python"] > 10
    shares = ("matmul_share", "other_ops_share", "python_share", "unattributed_share")
    assert sum(summary[k] for k in shares) == pytest.approx(1.0)
    assert systems.Seq2Seq.decode.__name__ == "decode"  # the profiling scopes were removed


def test_ctranslate2_peer_decodes_in_a_child_process_of_its_own() -> None:
    """With two threads, a translator that has run in a process slows the torch systems after
    it, so the peer lives in its own process; closing it ends that process."""
    pytest.importorskip("ctranslate2")
    pytest.importorskip("transformers")
    gen = systems.GEN_SYSTEMS["ct2-marian"](TOY)
    assert isinstance(gen, systems.ChildProcessGenerate)
    process = gen._process
    assert process.is_alive() and process.pid != os.getpid()
    src = gen_sources(TOY)
    assert gen(src, 1) == gen(src, 1)  # deterministic, and the child serves calls in turn
    gen.close()
    assert not process.is_alive()
