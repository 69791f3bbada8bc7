"""pass@k: the unbiased estimator (Chen et al. 2021) against exact binomials and hand-worked values."""

import math

import pytest

from rlvr.monitoring.evaluate import pass_at_k


def test_hand_worked():
    # n=4 samples, c=1 correct, k=2: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    # k=1 is the plain success rate c/n
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # n - c = 2 < k: every 3-subset holds a correct sample


@pytest.mark.parametrize("n,c,k", [(10, 2, 5), (20, 7, 3), (16, 1, 16), (8, 4, 2)])
def test_matches_exact_binomials(n, c, k):
    exact = 1 - math.comb(n - c, k) / math.comb(n, k) if n - c >= k else 1.0
    assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_k_larger_than_n_is_an_error():
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)
