"""One training step and one update, checked against the same computation written out."""

from __future__ import annotations

import logging
import math

import pytest
import torch
from torch import nn

from odet.data import ParallelDataset
from odet.models import ContinuousEncoderConfig, Seq2Seq, Seq2SeqConfig
from odet.training.checkpoint import TrainerState
from odet.training.config import LoopConfig, OptimConfig
from odet.training.loss import label_smoothed_loss
from odet.training.step import (
    Accumulation,
    ForwardPrecision,
    Objective,
    StepResult,
    UpdateResult,
    apply_update,
    build_optimizer,
    fused_adam_supported,
    record_skipped_update,
    train_step,
)
from tests.devices import repeat_tolerance


def _model(**overrides) -> Seq2Seq:
    options = dict(
        vocab_size=30,
        d_model=16,
        num_heads=2,
        ffn_dim=32,
        encoder_layers=2,
        decoder_layers=1,
        dropout=0.0,
    )
    options.update(overrides)
    torch.manual_seed(0)
    return Seq2Seq(Seq2SeqConfig(**options)).eval()


def _batch():
    dataset = ParallelDataset([[5, 6, 7], [8, 9], [10, 11, 12, 13]], [[14, 15], [16], [17, 18]])
    return dataset.batch([0, 1, 2])


def test_train_step_returns_the_summed_loss_and_accumulates_its_gradients(device):
    model, batch = _model().to(device), _batch().to(device)
    objective = Objective(pad_id=model.config.pad_id, label_smoothing=0.1)
    result = train_step(model, batch, objective, ForwardPrecision("fp32", device.type))
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    model.zero_grad()
    loss, nll, ntok = label_smoothed_loss(
        model(batch.src, batch.tgt_in), batch.tgt_out, smoothing=0.1, pad_id=model.config.pad_id
    )
    loss.backward()
    assert result == StepResult(loss=loss.item(), nll=nll.item(), tokens=ntok, nfe=None)
    assert ntok == 3 + 2 + 3  # targets plus EOS
    for name, p in model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(grads[name], p.grad, **repeat_tolerance(device))


def test_adam_is_torchs_fused_kernel_where_it_runs_and_updates_as_the_reference_does():
    optim = OptimConfig(lr=1e-2, warmup_updates=0, weight_decay=0.01)
    weights = [torch.randn(5, 3, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    runs = []
    for fused in (True, False):
        params = [nn.Parameter(w.clone()) for w in weights]
        if fused:
            optimizer, _ = build_optimizer(params, optim, max_updates=10)
            assert optimizer.defaults["fused"] is True
        else:
            optimizer = torch.optim.Adam(
                params, lr=1e-2, betas=optim.betas, eps=optim.eps, weight_decay=0.01, foreach=False
            )
        for step in range(3):
            for p in params:
                p.grad = p.detach().sin() + step
            optimizer.step()
        runs.append(params)
    for fused, reference in zip(*runs, strict=True):
        torch.testing.assert_close(fused, reference, rtol=1e-6, atol=1e-7)
    assert not fused_adam_supported([torch.zeros(2, dtype=torch.long)])
    assert not fused_adam_supported([])


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_step_and_an_adam_update_change_every_fp32_weight_on_the_device(precision, device):
    model = _model(encoder_method="rk2", decoder_method="rk2", coefficients="gated", dropout=0.1)
    model, batch = model.train().to(device), _batch().to(device)
    forward = ForwardPrecision.from_config(LoopConfig(precision=precision), device)
    optim = OptimConfig(lr=1e-3, warmup_updates=0, clip_norm=1.0)
    optimizer, scheduler = build_optimizer(model.parameters(), optim, max_updates=10)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    step = train_step(model, batch, Objective(model.config.pad_id, 0.1), forward)
    assert math.isfinite(step.loss) and step.tokens == 8
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.dtype == torch.float32, name
        assert p.grad.device == p.device and torch.isfinite(p.grad).all(), name
    result = apply_update(
        model.parameters(), optimizer, scheduler, loss=step.loss, tokens=step.tokens,
        world_size=1, clip_norm=optim.clip_norm,
    )  # fmt: skip
    assert result.applied and math.isfinite(result.grad_norm)
    for name, p in model.named_parameters():
        assert p.dtype == torch.float32 and p.device.type == device.type, name
        assert not torch.equal(p.detach(), before[name]), name
    for state in optimizer.state.values():
        assert state["exp_avg"].device == state["exp_avg_sq"].device
        assert state["exp_avg"].device.type == device.type


def test_arclength_regulariser_adds_its_weight_times_arclength_per_token(device):
    continuous = ContinuousEncoderConfig(arclength=True, rtol=1e-2, atol=1e-2)
    model = _model(encoder_method="adaptive", continuous=continuous).to(device)
    batch = _batch().to(device)
    fp32 = ForwardPrecision("fp32", device.type)
    plain = train_step(model, batch, Objective(model.config.pad_id, 0.0), fp32)
    regularised = train_step(model, batch, Objective(model.config.pad_id, 0.0, 0.5), fp32)
    _, stats = model(batch.src, batch.tgt_in, with_stats=True)
    assert plain.nfe == regularised.nfe == float(stats.nfe.float().mean()) and plain.nfe >= 2
    expected = plain.loss + 0.5 * stats.arclength.mean().item() * plain.tokens
    assert regularised.loss == pytest.approx(expected, rel=1e-5)
    assert regularised.nll == plain.nll


def test_a_flagged_solve_failure_makes_the_step_loss_nan_after_a_full_backward(device):
    """Training on states that never reached t1 was silent; the step must still backpropagate
    (data-parallel ranks all-reduce in backward) and make its update skip on every rank."""
    continuous = ContinuousEncoderConfig(max_steps=1, on_failure="flag")
    model = _model(encoder_method="adaptive", continuous=continuous).to(device)
    batch = _batch().to(device)
    step = train_step(model, batch, Objective(model.config.pad_id, 0.0),
                      ForwardPrecision("fp32", device.type))  # fmt: skip
    assert math.isnan(step.loss) and math.isfinite(step.nll)
    assert step.failed_solves == batch.src.shape[0]
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_accumulation_sums_steps():
    sums = Accumulation()
    sums.add(StepResult(loss=2.0, nll=1.5, tokens=4, nfe=None))
    sums.add(StepResult(loss=3.0, nll=2.5, tokens=6, nfe=7.0, failed_solves=2))
    assert sums == Accumulation(batches=2, tokens=10, loss=5.0, nll=4.0, failed_solves=2)


def _sgd_problem():
    weight = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    weight.grad = torch.tensor([3.0, 4.0])
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    return weight, optimizer, scheduler


def test_apply_update_divides_gradients_by_tokens_times_world_size_then_steps():
    weight, optimizer, scheduler = _sgd_problem()
    result = apply_update(
        [weight], optimizer, scheduler, loss=10.0, tokens=4.0, world_size=2, clip_norm=0.0
    )
    assert result == UpdateResult(applied=True, loss_finite=True, grad_norm=2.5)
    torch.testing.assert_close(weight.detach(), torch.tensor([1.0 - 1.5, 2.0 - 2.0]))
    assert weight.grad is None and scheduler.get_last_lr() == [0.5]


def test_apply_update_clips_to_clip_norm_and_reports_the_norm_before():
    weight, optimizer, scheduler = _sgd_problem()
    result = apply_update(
        [weight], optimizer, scheduler, loss=1.0, tokens=1.0, world_size=1, clip_norm=1.0
    )
    assert result.grad_norm == pytest.approx(5.0)
    torch.testing.assert_close(weight.detach(), torch.tensor([1.0 - 0.6, 2.0 - 0.8]))


@pytest.mark.parametrize("bad", ["loss", "gradients"])
def test_apply_update_skips_non_finite_updates_and_clears_gradients(bad):
    weight, optimizer, scheduler = _sgd_problem()
    if bad == "gradients":
        weight.grad[0] = float("inf")
    loss = float("nan") if bad == "loss" else 1.0
    result = apply_update(
        [weight], optimizer, scheduler, loss=loss, tokens=1.0, world_size=1, clip_norm=0.0
    )
    assert not result.applied and result.loss_finite == (bad == "gradients")
    torch.testing.assert_close(weight.detach(), torch.tensor([1.0, 2.0]))
    assert weight.grad is None and scheduler.get_last_lr() == [1.0]


def test_record_skipped_update_counts_and_stops_after_too_many_in_a_row(caplog):
    state = TrainerState(step=7)
    skipped = UpdateResult(applied=False, loss_finite=False, grad_norm=float("nan"))
    with caplog.at_level(logging.WARNING, logger="odet.train"):
        record_skipped_update(state, skipped, max_in_a_row=2)
    assert (state.skipped_updates, state.bad_in_a_row) == (1, 1)
    assert "non-finite loss at update 8: step skipped (1 in a row, 1 in total)" in caplog.text
    with pytest.raises(FloatingPointError, match="2 updates in a row had non-finite loss"):
        record_skipped_update(state, skipped, max_in_a_row=2)


def test_a_skipped_update_names_the_failed_solves_and_the_solver_settings_to_change(caplog):
    state = TrainerState(step=4)
    skipped = UpdateResult(applied=False, loss_finite=False, grad_norm=float("nan"))
    with caplog.at_level(logging.WARNING, logger="odet.train"):
        record_skipped_update(state, skipped, max_in_a_row=2, failed_solves=3)
    assert "encoder solve failed for 3 sentences at update 5: step skipped" in caplog.text
    expected = r"the encoder solve failed for 3 sentences \(at update 5\); raise model.continuous"
    with pytest.raises(FloatingPointError, match=expected):
        record_skipped_update(state, skipped, max_in_a_row=2, failed_solves=3)


def test_build_optimizer_is_adam_with_the_configured_warmup():
    model = torch.nn.Linear(2, 2)
    optim = OptimConfig(lr=1e-3, betas=(0.9, 0.99), warmup_updates=10, warmup_init_lr=0.0)
    optimizer, scheduler = build_optimizer(model.parameters(), optim, max_updates=0)
    assert isinstance(optimizer, torch.optim.Adam)
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.99)
    assert scheduler.get_last_lr() == [0.0]
    for _ in range(5):
        optimizer.step()
        scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(0.5e-3)


@pytest.mark.parametrize(
    ("precision", "sdpa", "autocast"),
    [("fp32", "math", False), ("bf16", "math", True), ("bf16", "fused", True)],
)
def test_forward_precision_autocasts_bf16_only(precision, sdpa, autocast, device):
    train = LoopConfig(precision=precision, bf16_sdpa=sdpa)
    forward = ForwardPrecision.from_config(train, device)
    assert forward.math_sdpa == (sdpa == "math")
    with forward.context():
        assert torch.is_autocast_enabled(device.type) == autocast
        product = torch.ones(2, 2, device=device) @ torch.ones(2, 2, device=device)
    assert product.dtype == (torch.bfloat16 if autocast else torch.float32)
