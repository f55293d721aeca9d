import math

import pytest
import torch

from odet.training.schedule import (
    SCHEDULES,
    cosine_factor,
    inverse_sqrt_factor,
    linear_factor,
    make_schedule,
)


def _optimizer(lr: float = 2e-3) -> torch.optim.Optimizer:
    return torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=lr)


def _lrs(scheduler: torch.optim.lr_scheduler.LambdaLR, steps: int) -> list[float]:
    lrs = [scheduler.get_last_lr()[0]]
    for _ in range(steps):
        scheduler.optimizer.step()
        scheduler.step()
        lrs.append(scheduler.get_last_lr()[0])
    return lrs


def test_inverse_sqrt_warms_up_linearly_then_decays_as_one_over_sqrt_step():
    assert inverse_sqrt_factor(0, 100, 0.1) == pytest.approx(0.1)
    assert inverse_sqrt_factor(50, 100, 0.0) == pytest.approx(0.5)
    assert inverse_sqrt_factor(100, 100) == pytest.approx(1.0)
    assert inverse_sqrt_factor(400, 100) == pytest.approx(0.5)
    assert inverse_sqrt_factor(1600, 100) == pytest.approx(0.25)


@pytest.mark.parametrize("min_ratio", [0.0, 0.1])
def test_cosine_decays_from_the_peak_to_min_ratio_at_total(min_ratio):
    warmup, total = 10, 110
    assert cosine_factor(5, warmup, total) == pytest.approx(0.5)
    assert cosine_factor(warmup, warmup, total, min_ratio=min_ratio) == pytest.approx(1.0)
    midpoint = cosine_factor(60, warmup, total, min_ratio=min_ratio)
    assert midpoint == pytest.approx((1 + min_ratio) / 2)
    quarter = cosine_factor(35, warmup, total, min_ratio=min_ratio)
    assert quarter == pytest.approx(min_ratio + (1 - min_ratio) * (1 + math.cos(math.pi / 4)) / 2)
    assert cosine_factor(total, warmup, total, min_ratio=min_ratio) == pytest.approx(min_ratio)
    assert cosine_factor(total + 50, warmup, total, min_ratio=min_ratio) == pytest.approx(min_ratio)


def test_linear_decays_in_a_straight_line_to_min_ratio_at_total():
    assert linear_factor(10, 10, 110) == pytest.approx(1.0)
    assert linear_factor(35, 10, 110) == pytest.approx(0.75)
    assert linear_factor(110, 10, 110, min_ratio=0.2) == pytest.approx(0.2)
    assert linear_factor(500, 10, 110, min_ratio=0.2) == pytest.approx(0.2)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_make_schedule_scales_the_optimizer_lr_by_the_named_factor(name):
    peak, warmup, total = 2e-3, 4, 20
    scheduler = make_schedule(
        _optimizer(peak), name, warmup=warmup, warmup_init_lr=1e-5, total=total, min_ratio=0.05
    )
    lrs = _lrs(scheduler, 30)
    factor = SCHEDULES[name]
    for step, lr in enumerate(lrs):
        assert lr == pytest.approx(peak * factor(step, warmup, total, 1e-5 / peak, 0.05)), step
    assert max(lrs) == pytest.approx(peak)
    assert lrs[0] == pytest.approx(1e-5)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_a_schedule_restored_from_its_state_dict_continues_identically(name):
    first = make_schedule(_optimizer(), name, warmup=3, total=12)
    _lrs(first, 7)
    second = make_schedule(_optimizer(), name, warmup=3, total=12)
    second.load_state_dict(first.state_dict())
    assert _lrs(second, 5) == _lrs(first, 5)


def test_decaying_schedules_need_a_total_above_the_warmup():
    with pytest.raises(ValueError, match=r"'cosine' schedule needs a total .* above the warmup"):
        make_schedule(_optimizer(), "cosine", warmup=100, total=0)
    with pytest.raises(ValueError, match=r"unknown lr schedule 'step'"):
        make_schedule(_optimizer(), "step", warmup=10, total=100)  # type: ignore[arg-type]
