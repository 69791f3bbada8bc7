"""Spearman's rank correlation and its confidence interval by a cluster bootstrap (pure Python, no scipy).

Used to check a screen statistic against what RL then gained: several RL runs (seeds) start from each
checkpoint, so the runs of one checkpoint share its screen and are not independent; the bootstrap resamples
whole checkpoints (clusters), keeping each one's runs together.
"""

from __future__ import annotations

import math
import random


def average_ranks(values: list[float]) -> list[float]:
    """Ranks 1..n of ``values``, ties given the mean of the ranks they span ([10, 20, 20, 30] -> [1, 2.5, 2.5, 4])."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def pearson(x: list[float], y: list[float]) -> float | None:
    """Pearson's r; None when either side has no spread (the correlation is undefined)."""
    n = len(x)
    if n != len(y):
        raise ValueError(f"pearson: {n} x values against {len(y)} y values")
    if n < 2:
        return None
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx <= 0 or syy <= 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def spearman(x: list[float], y: list[float]) -> float | None:
    """Spearman's ρ: Pearson's r of the average ranks (ties handled); None when either side is constant."""
    return pearson(average_ranks(list(x)), average_ranks(list(y)))


def spearman_interval(x: list[float], y: list[float], clusters: list | None = None, level: float = 0.95,
                      draws: int = 10000, seed: int = 0) -> dict:
    """ρ with a percentile bootstrap interval: each draw takes as many clusters as there are, with replacement,
    every point of a drawn cluster (``clusters[i]`` names point i's cluster; None: each point its own), and
    computes ρ; draws where ρ is undefined (a constant side) are left out and counted. Returns ``{"rho", "low",
    "high", "n", "clusters", "draws", "undefined_draws"}``; ``low``/``high`` None when fewer than 3 clusters."""
    if len(x) != len(y) or (clusters is not None and len(clusters) != len(x)):
        raise ValueError("spearman_interval: x, y and clusters must have one entry per point")
    clusters = list(range(len(x))) if clusters is None else list(clusters)
    names = sorted(set(clusters), key=str)
    members = {c: [i for i, k in enumerate(clusters) if k == c] for c in names}
    out = {"rho": spearman(x, y), "low": None, "high": None, "n": len(x), "clusters": len(names),
           "draws": 0, "undefined_draws": 0}
    if len(names) < 3:
        return out
    rng = random.Random(seed)
    rhos, undefined = [], 0
    for _ in range(draws):
        idx = [i for c in (rng.choice(names) for _ in names) for i in members[c]]
        r = spearman([x[i] for i in idx], [y[i] for i in idx])
        if r is None:
            undefined += 1
        else:
            rhos.append(r)
    rhos.sort()
    if rhos:
        a = (1.0 - level) / 2.0
        out["low"] = rhos[min(len(rhos) - 1, math.floor(a * len(rhos)))]
        out["high"] = rhos[min(len(rhos) - 1, math.ceil((1.0 - a) * len(rhos)) - 1)]
    out["draws"], out["undefined_draws"] = len(rhos), undefined
    return out
