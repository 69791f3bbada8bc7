"""Spearman's ρ against hand-worked values, ties, undefined cases, and the cluster bootstrap's interval."""

from __future__ import annotations

import pytest

from rlvr.monitoring.rank_correlation import average_ranks, spearman, spearman_interval


def test_ties_get_the_mean_of_the_ranks_they_span():
    assert average_ranks([10, 20, 20, 30]) == [1.0, 2.5, 2.5, 4.0]
    assert average_ranks([3, 1, 2]) == [3.0, 1.0, 2.0]
    assert average_ranks([5, 5, 5]) == [2.0, 2.0, 2.0]


def test_rho_matches_the_hand_worked_values():
    # no ties: 1 - 6 Σd² / (n(n²-1)), d = [-1, 1, -1, 1, 0], Σd² = 4 -> 1 - 24/120 = 0.8
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    # ties: Pearson of ranks [1, 2.5, 2.5, 4] and [1, 2, 3, 4]: 4.5 / sqrt(4.5 * 5)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / (4.5 * 5) ** 0.5)
    # monotone, not linear: ranks only
    assert spearman([1, 2, 3, 4], [1, 10, 100, 1000]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [9, 7, 3, 0]) == pytest.approx(-1.0)


def test_a_constant_side_has_no_correlation():
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert spearman([1, 2, 3], [0.5, 0.5, 0.5]) is None


def test_lengths_must_agree():
    with pytest.raises(ValueError, match="one entry per point"):
        spearman_interval([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="one entry per point"):
        spearman_interval([1, 2, 3], [1, 2, 3], clusters=["a", "b"])


def test_the_bootstrap_resamples_whole_clusters():
    # two runs per checkpoint, equal within one: whole clusters drawn keep x and y tied alike -> every defined
    # draw is exactly 1 (a draw splitting a cluster's runs could not be)
    x = [0.1, 0.1, 0.2, 0.2, 0.3, 0.3, 0.4, 0.4]
    y = [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]
    out = spearman_interval(x, y, clusters=[1, 1, 2, 2, 3, 3, 4, 4], draws=500)
    assert out["rho"] == pytest.approx(1.0)
    assert out["low"] == pytest.approx(1.0) and out["high"] == pytest.approx(1.0)
    assert out["n"] == 8 and out["clusters"] == 4
    # a draw of one cluster four times has a constant x: undefined, counted, left out (4 of 4^4 draws on average)
    assert out["draws"] + out["undefined_draws"] == 500


def test_the_interval_holds_rho_and_repeats_with_its_seed():
    x = [1, 2, 3, 4, 5, 6, 7, 8]
    y = [2, 1, 4, 3, 6, 8, 5, 7]
    a = spearman_interval(x, y, draws=2000, seed=3)
    assert a == spearman_interval(x, y, draws=2000, seed=3)
    assert -1.0 <= a["low"] <= a["rho"] <= a["high"] <= 1.0
    assert a["high"] - a["low"] > 0.1  # eight noisy points: a wide interval, not a point


def test_fewer_than_three_clusters_give_no_interval():
    out = spearman_interval([1, 2, 3, 4], [1, 2, 4, 3], clusters=["a", "a", "b", "b"])
    assert out["rho"] == pytest.approx(0.8) and out["low"] is None and out["high"] is None
