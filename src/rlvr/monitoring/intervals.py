"""Confidence intervals: the Student t quantile, the t-interval of paired differences, and the Wilson score bound
of a pass rate.

Pure Python (no scipy): the t distribution's CDF is the regularised incomplete beta function, computed by its
continued fraction (Lentz's method), and the quantile inverts it by bisection to ~1e-12.
"""

from __future__ import annotations

import math


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz), converging for x < (a+1)/(a+b+2)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom: 1 - I_{df/(df+t²)}(df/2, 1/2) / 2 for t >= 0."""
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` > 0 degrees of freedom (t_{0.975, 2} = 4.3027)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile: need 0 < p < 1 and df > 0 (got p={p}, df={df})")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def paired_interval(diffs: list[float], level: float = 0.95) -> dict:
    """The t-interval of the mean of paired differences (one per seed): ``mean ± t_{(1+level)/2, n-1} · s/√n``
    with ``s`` the sample standard deviation (n-1 in its denominator). Returns ``{"n", "mean", "sd",
    "half_width", "low", "high"}``; with fewer than 2 differences the interval is undefined: ``half_width``,
    ``low``, ``high`` are None and ``"note"`` says why."""
    n = len(diffs)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "half_width": None, "low": None, "high": None,
                "note": "no paired seeds"}
    mean = sum(diffs) / n
    if n < 2:
        return {"n": 1, "mean": mean, "sd": None, "half_width": None, "low": None, "high": None,
                "note": "one seed: no interval (needs 2 or more seeds)"}
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_quantile((1.0 + level) / 2.0, n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "half_width": half, "low": mean - half, "high": mean + half}


def wilson_lower(p: float, n: int, z: float = 1.96) -> float:
    """The lower end of the Wilson score interval of a pass rate ``p`` measured on ``n`` tasks (95% for z = 1.96)."""
    zz = z * z / n
    return max(0.0, (p + zz / 2 - z * math.sqrt(p * (1 - p) / n + zz / (4 * n))) / (1 + zz))
