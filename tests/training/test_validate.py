"""Validation loss, references, best-checkpoint tracking and the coefficient record."""

from __future__ import annotations

import math

import pytest
import torch

from odet.data import DataError, ParallelDataset, Tokenizer, TokenizerPair, read_parallel_text
from odet.models import Seq2Seq, Seq2SeqConfig
from odet.training.checkpoint import TrainerState
from odet.training.config import DataConfig, LoopConfig, TrainConfig
from odet.training.loss import label_smoothed_loss
from odet.training.prepare import ValidationSet
from odet.training.step import ForwardPrecision
from odet.training.validate import (
    Evaluator,
    best_metric_key,
    coefficient_record,
    improves,
    references,
    track_best,
    validation_loss,
)

FP32 = ForwardPrecision("fp32", "cpu")


def _model(**overrides) -> Seq2Seq:
    options = dict(
        vocab_size=30, d_model=16, num_heads=2, ffn_dim=32, encoder_layers=2, decoder_layers=1
    )
    options.update(overrides)
    torch.manual_seed(0)
    return Seq2Seq(Seq2SeqConfig(**options))


def _dataset() -> ParallelDataset:
    return ParallelDataset(
        [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]], [[15, 16], [17], [18, 19, 20], [21, 22]]
    )


def test_validation_loss_is_the_mean_nll_per_target_token_over_all_batches():
    model, dataset = _model(), _dataset()
    loss = validation_loss(model, dataset, max_tokens=8, device=torch.device("cpu"), precision=FP32)
    batch = dataset.batch(list(range(len(dataset))))
    with torch.no_grad():
        logits = model.eval()(batch.src, batch.tgt_in)
    _, nll, ntok = label_smoothed_loss(logits, batch.tgt_out, smoothing=0.0, pad_id=0)
    assert loss == pytest.approx(nll.item() / ntok, rel=1e-5)


def _pairs(tmp_path):
    (tmp_path / "v.src").write_text("a\n\nc\nd\n")
    (tmp_path / "v.tgt").write_text("A\nB\nC\nD\n")
    return read_parallel_text(tmp_path / "v.src", tmp_path / "v.tgt")  # line 2 skipped


def test_references_add_extra_files_aligned_by_line_number(tmp_path):
    (tmp_path / "v.ref2").write_text("A2\nB2\nC2\nD2\n")
    data = DataConfig(data_dir=str(tmp_path), train=("v.src", "v.tgt"))
    refs = references(data, _pairs(tmp_path), ("v.ref2",))
    assert refs == [["A", "A2"], ["C", "C2"], ["D", "D2"]]
    (tmp_path / "short.ref").write_text("A2\nB2\n")
    with pytest.raises(DataError, match="short.ref has 2 lines, fewer than the split's 4"):
        references(data, _pairs(tmp_path), ("short.ref",))


def test_best_metric_is_the_lowest_loss_or_the_highest_metric():
    assert best_metric_key(LoopConfig(best_metric="metric", valid_metric="chrf")) == "chrf"
    assert best_metric_key(LoopConfig(best_metric="loss", valid_metric="bleu")) == "loss"
    assert improves("loss", 2.0, None) and improves("bleu", 2.0, None)
    assert improves("loss", 1.0, 2.0) and not improves("loss", 2.0, 2.0)
    assert improves("bleu", 3.0, 2.0) and not improves("bleu", 1.0, 2.0)


def test_track_best_updates_the_best_or_counts_a_bad_epoch():
    state, train = TrainerState(step=10), LoopConfig(best_metric="loss", valid_metric="none")
    assert track_best(state, {"loss": 3.0}, train)
    assert (state.best_metric, state.best_step, state.bad_epochs) == (3.0, 10, 0)
    state.step = 20
    assert not track_best(state, {"loss": 3.5}, train)
    assert (state.best_metric, state.best_step, state.bad_epochs) == (3.0, 10, 1)


def test_coefficient_record_only_for_blocks_whose_weights_train():
    valid = ValidationSet(pairs=None, dataset=_dataset())  # type: ignore[arg-type]
    cpu = torch.device("cpu")
    assert coefficient_record(_model(), valid, cpu) is None
    gated = _model(encoder_method="rk2", coefficients="gated")
    assert coefficient_record(gated, None, cpu) is None
    record = coefficient_record(gated, valid, cpu)
    assert record is not None and len(record["encoder"]) == 2
    assert all(len(row) == 1 and 0 < row[0] < 1 for row in record["encoder"])


def _run_setup(tmp_path, **train) -> tuple[TrainConfig, TokenizerPair, ValidationSet]:
    """A tiny run's config (``train`` keys in its loop section), tokenizer and validation set."""
    pairs = _pairs(tmp_path)
    tokenizers = TokenizerPair.joint(
        Tokenizer.train(["a b c d A B C D"] * 20, vocab_size=16, model_type="bpe")
    )
    dataset = ParallelDataset.from_texts(pairs.source, pairs.target, tokenizers)
    config = TrainConfig(
        output_dir=str(tmp_path / "run"),
        data=DataConfig(data_dir=str(tmp_path), train=("v.src", "v.tgt"), vocab_size=16),
        model={"d_model": 16, "num_heads": 2, "ffn_dim": 32},
        train=LoopConfig(**train),
    )
    return config, tokenizers, ValidationSet(pairs, dataset)


def test_evaluator_validate_gives_loss_and_perplexity_and_restores_train_mode(tmp_path):
    config, tokenizers, valid = _run_setup(tmp_path, valid_metric="none", best_metric="loss")
    pairs, dataset = valid.pairs, valid.dataset
    model = _model(vocab_size=tokenizers.source.vocab_size)
    evaluator = Evaluator(config, tokenizers, torch.device("cpu"), FP32)
    assert evaluator.validate(model, None) == {}
    metrics = evaluator.validate(model, ValidationSet(pairs, dataset))
    assert set(metrics) == {"loss", "ppl"} and metrics["ppl"] == math.exp(metrics["loss"])
    assert model.training


def test_a_bf16_run_validates_and_decodes_in_fp32(tmp_path):
    """Evaluation runs at ``generation.precision`` (fp32 here), not at ``train.precision``."""
    from dataclasses import replace

    from odet.training.step import ForwardPrecision

    config, tokenizers, valid = _run_setup(
        tmp_path, valid_metric="bleu", best_metric="loss", precision="bf16"
    )
    generation = replace(config.generation, beam_size=1, max_len_b=3, gemm="torch")
    config = replace(config, generation=generation)  # torch: decoding goes through the hook
    model = _model(vocab_size=tokenizers.source.vocab_size)
    seen: list[tuple[bool, torch.dtype]] = []
    model.output_projection.register_forward_hook(
        lambda module, args, out: seen.append((torch.is_autocast_enabled("cpu"), out.dtype))
    )
    evaluation = ForwardPrecision.for_evaluation(config.generation.precision, torch.device("cpu"))
    assert evaluation == ForwardPrecision("fp32", "cpu")
    Evaluator(config, tokenizers, torch.device("cpu"), evaluation).validate(model, valid)
    assert len(seen) > 1 and set(seen) == {(False, torch.float32)}  # loss and decoding alike
