"""The Student t quantile and the paired t-interval of a sweep, against printed tables and hand-worked numbers."""

import math

import pytest

from rlvr.monitoring.intervals import paired_interval, t_cdf, t_quantile


@pytest.mark.parametrize("df, q", [(1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (9, 2.2622),
                                   (29, 2.0452), (120, 1.9799)])
def test_t_quantile_matches_the_printed_table(df, q):
    assert t_quantile(0.975, df) == pytest.approx(q, abs=1e-4)


def test_t_quantile_is_symmetric_and_inverts_the_cdf():
    assert t_quantile(0.025, 5) == pytest.approx(-t_quantile(0.975, 5), abs=1e-10)
    assert t_quantile(0.5, 7) == pytest.approx(0.0, abs=1e-9)
    for df in (1, 3, 10):
        for p in (0.6, 0.9, 0.995):
            assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-10)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_paired_interval_by_hand():
    # diffs [1, 2, 3]: mean 2, sd sqrt(((1-2)^2 + 0 + (3-2)^2) / 2) = 1, se 1/sqrt(3) = 0.5774,
    # t_{0.975, 2} = 4.3027, half-width 4.3027 * 0.5774 = 2.4841 -> [-0.4841, 4.4841]
    iv = paired_interval([1.0, 2.0, 3.0])
    assert iv["n"] == 3 and iv["mean"] == pytest.approx(2.0) and iv["sd"] == pytest.approx(1.0)
    assert iv["half_width"] == pytest.approx(4.302653 / math.sqrt(3), abs=1e-5)
    assert (iv["low"], iv["high"]) == pytest.approx((-0.48414, 4.48414), abs=1e-5)


def test_paired_interval_with_one_seed_is_undefined_and_says_so():
    iv = paired_interval([0.25])
    assert iv["mean"] == 0.25 and iv["half_width"] is None and iv["low"] is None and "one seed" in iv["note"]
    assert paired_interval([])["mean"] is None
