"""The paired t-test across seeds: exact p-values (against scipy where installed)."""

from __future__ import annotations

import math

import pytest

from odet.evaluation import paired_t_test
from odet.evaluation.statistics import student_t_two_sided_p


@pytest.mark.parametrize("df", range(1, 10))
@pytest.mark.parametrize("t", [0.0, 0.4, 1.0, 2.5, -3.0, 30.0])
def test_the_two_sided_p_value_is_students(df, t):
    stats = pytest.importorskip("scipy.stats")
    assert student_t_two_sided_p(t, df) == pytest.approx(2 * stats.t.sf(abs(t), df), abs=1e-12)


def test_closed_forms_of_one_and_two_degrees_of_freedom():
    assert student_t_two_sided_p(1.0, 1) == pytest.approx(0.5)  # Cauchy: P(|T| >= 1)
    assert student_t_two_sided_p(2.0, 2) == pytest.approx(1 - 2 / math.sqrt(6))


def test_paired_t_test_is_on_the_differences_seed_by_seed():
    baseline, system = [1.90, 1.95, 1.88], [1.92, 1.96, 1.91]
    test = paired_t_test(baseline, system)
    assert test.delta == pytest.approx(0.02) and test.df == 2
    # differences 0.02, 0.01, 0.03: mean 0.02, std 0.01, t = 0.02 / (0.01 / sqrt 3)
    assert test.t == pytest.approx(2 * math.sqrt(3))
    assert 0.0 < test.p_value < 0.1
    assert paired_t_test([1.0, 2.0], [1.5, 2.5]).p_value == 0.0
    assert paired_t_test([1.0, 2.0], [1.0, 2.0]).p_value == 1.0


def test_unpaired_or_single_runs_are_errors():
    with pytest.raises(ValueError, match="at least two pairs"):
        paired_t_test([1.0], [2.0])
    with pytest.raises(ValueError, match="2 baseline scores but 3"):
        paired_t_test([1.0, 2.0], [1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    ("baseline", "error", "message"),
    [
        ([1.0, 2.0, math.nan], ValueError, r"baseline\[2\] must be a number, got NaN"),
        ([1.0, 2.0, math.inf], ValueError, r"baseline\[2\] = inf is not a finite score"),
        (["1", "2", "3"], TypeError, r"baseline\[0\] must be a number, got '1'"),
        ([1.0, None, 3.0], TypeError, r"baseline\[1\] must be a number, got None"),
        (3.0, TypeError, "baseline must be a sequence of scores, got float"),
    ],
)
def test_scores_that_are_not_finite_numbers_are_named(baseline, error, message):
    with pytest.raises(error, match=message):
        paired_t_test(baseline, [2.0, 3.0, 4.0])


def test_a_nan_t_has_no_p_value_rather_than_p_0():
    with pytest.raises(ValueError, match="t must be a number, got NaN"):
        student_t_two_sided_p(math.nan, 3)
    assert student_t_two_sided_p(math.inf, 3) == 0.0
    with pytest.raises(TypeError, match="df must be an int, got 2.5"):
        student_t_two_sided_p(2.0, 2.5)
