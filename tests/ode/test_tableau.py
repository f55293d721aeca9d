import dataclasses

import pytest

from odet.ode import TABLEAUS, ButcherTableau, get_tableau, rooted_trees


def test_number_of_rooted_trees_matches_oeis_a000081():
    assert [len(rooted_trees(n)) for n in range(1, 7)] == [1, 1, 2, 4, 9, 20]


@pytest.mark.parametrize("name", sorted(TABLEAUS))
def test_every_registered_tableau_is_valid_and_explicit(name):
    tab = TABLEAUS[name]
    s = tab.num_stages
    assert all(tab.a[i][j] == 0.0 for i in range(s) for j in range(i, s))
    assert sum(tab.b) == pytest.approx(1.0)


def test_rk2_is_the_papers_heun_step():
    rk2 = TABLEAUS["rk2"]
    assert rk2 is TABLEAUS["heun"]
    assert rk2.a[1][0] == 1.0 and rk2.b == (0.5, 0.5)


def test_rk3_is_kuttas_third_order_method_with_stage_three_y_minus_k1_plus_2k2():
    assert TABLEAUS["rk3"].a[2][:2] == (-1.0, 2.0)
    assert TABLEAUS["rk3"].order == 3


def test_replacing_weights_that_do_not_sum_to_one_raises():
    with pytest.raises(ValueError, match="b must sum to 1"):
        dataclasses.replace(TABLEAUS["heun"], b=(0.3, 0.3))


def test_row_sum_not_matching_c_raises():
    with pytest.raises(ValueError, match="row 1 of a sums to"):
        ButcherTableau(a=((), (0.5,)), b=(0.5, 0.5), c=(0.0, 1.0), order=1)


def test_nonzero_entry_on_or_above_diagonal_raises():
    with pytest.raises(ValueError, match="strictly lower-triangular"):
        ButcherTableau(a=((0.0, 1.0), (1.0, 0.0)), b=(0.5, 0.5), c=(1.0, 1.0), order=1)


def test_declared_order_is_verified_by_the_order_conditions():
    with pytest.raises(ValueError, match="order-5 condition"):
        dataclasses.replace(TABLEAUS["rk4"], order=5)
    # The paper code's RK3 (stage 3 = y + k1 instead of y − k1 + 2k2) is not third order.
    with pytest.raises(ValueError, match="order-3 condition"):
        dataclasses.replace(TABLEAUS["rk3"], a=((), (0.5,), (1.0, 0.0)))


def test_embedded_error_weights_must_sum_to_zero():
    bad = tuple(x + 0.01 for x in TABLEAUS["bosh3"].b_error)
    with pytest.raises(ValueError, match="b_error must sum to 0"):
        dataclasses.replace(TABLEAUS["bosh3"], b_error=bad)


def test_embedded_pairs_record_both_orders_and_fsal():
    assert (TABLEAUS["dopri5"].order, TABLEAUS["dopri5"].embedded_order) == (5, 4)
    assert (TABLEAUS["bosh3"].order, TABLEAUS["bosh3"].embedded_order) == (3, 2)
    assert TABLEAUS["dopri5"].fsal and TABLEAUS["bosh3"].fsal and not TABLEAUS["rk4"].fsal


def test_tableau_is_frozen_and_lists_become_tuples():
    tab = ButcherTableau(a=[[0, 0], [1, 0]], b=[0.5, 0.5], c=[0, 1], order=2)
    assert tab == TABLEAUS["heun"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        tab.order = 3  # type: ignore[misc]


def test_unknown_method_lists_the_choices():
    with pytest.raises(ValueError, match="unknown Runge–Kutta method 'rk5'.*rk4"):
        get_tableau("rk5")
