"""Curve assembly of ``time_to_accuracy.py`` (no torch, no TRL: unit-tested alone).

A run's checkpoints are ``[process_s, path, step, rows_trained]``: saved at ``process_s`` seconds of the
run's process clock, at optimizer step ``step``, after ``rows_trained`` rows were forwarded and backwarded.
A curve is ``[[seconds, solved_fraction], ...]`` from the SFT checkpoint at 0 s; marks are ``0, every, ...,
seconds``.
"""

from __future__ import annotations

import math
import statistics


def in_window(checkpoints: list[list], seconds: float) -> list[list]:
    """The ``[process_s, path]`` checkpoints of the window: those before ``seconds`` and the first one at or
    after it (the last mark's; TRL stops there, rlvr's later ones are not scored)."""
    ordered = sorted(checkpoints, key=lambda c: c[0])
    late = [c for c in ordered if c[0] >= seconds][:1]
    return [c for c in ordered if c[0] < seconds] + late


def window_summary(checkpoints: list[list], seconds: float, rows_per_step: int) -> dict:
    """Steps, rows trained and rows sampled up to the window's last checkpoint, and its time."""
    win = in_window(checkpoints, seconds)
    if not win:
        return {"seconds": None, "steps": 0, "rows_trained": 0, "rows_sampled": 0}
    s, _, steps, rows = win[-1]
    return {"seconds": s, "steps": steps, "rows_trained": rows, "rows_sampled": steps * rows_per_step}


def curve(start: float, points: list[tuple[float, float]]) -> list[list[float]]:
    """``[[0, start], [seconds, solved], ...]`` in time order (the SFT checkpoint at 0 s)."""
    return [[0.0, round(start, 4)]] + [[round(s, 2), round(v, 4)] for s, v in sorted(points)]


def at_marks(c: list[list[float]], every: float, seconds: float) -> list[list[float]]:
    """A run's curve read at the marks ``0, every, ..., seconds``: at each mark, the score of the last
    checkpoint saved for a mark at or before it (a checkpoint saved at ``s`` seconds is the one for mark
    ``floor(s / every) * every``, capped at ``seconds``; the SFT checkpoint is mark 0). A mark a run saved
    nothing for (its first step ended later) keeps the score before it."""
    marks = [round(k * every, 6) for k in range(int(seconds // every + 1e-9) + 1)]
    out, j, value = [], 0, c[0][1]
    for m in marks:
        while j < len(c) and min(math.floor(c[j][0] / every + 1e-9) * every, seconds) <= m + 1e-9:
            value = c[j][1]
            j += 1
        out.append([m, value])
    return out


def mean_curve(curves: list[list[list[float]]]) -> list[list[float]]:
    """The seeds' mean, mark by mark (curves from :func:`at_marks`)."""
    return [[curves[0][i][0], round(statistics.fmean(c[i][1] for c in curves), 4)] for i in range(len(curves[0]))]


def acceptance(mean: dict) -> dict:
    """The issue's lines on the seeds' mean curves at the marks: rlvr >= TRL at every mark after 0; rlvr's first
    mark after 0 at or above TRL's final score is <= 0.5x TRL's final mark; TRL gains >= 5 points over the SFT
    checkpoint (the window is long enough)."""
    r, t = mean["rlvr"], mean["trl"]
    every = all(x[1] >= y[1] for x, y in zip(r[1:], t[1:]))
    reach = next((s for s, v in r[1:] if v >= t[-1][1]), None)
    ratio = None if reach is None else round(reach / t[-1][0], 3)
    gain = round(t[-1][1] - t[0][1], 4)
    return {"rlvr_at_least_trl_every_mark": every, "rlvr_reaches_trl_final_s": reach, "trl_final_s": t[-1][0],
            "reach_ratio": ratio, "reach_within_half": ratio is not None and ratio <= 0.5,
            "trl_gain_over_sft": gain, "window_long_enough": gain >= 0.05,
            "met": every and ratio is not None and ratio <= 0.5 and gain >= 0.05}


def assemble(runs: dict, scores: dict, sft: float, every: float, seconds: float, rows_per_step: int) -> dict:
    """The JSON's ``seeds`` / ``mean`` / ``acceptance`` from ``runs`` ({seed: {side: run result with its
    ``checkpoints``}}), ``scores`` ({checkpoint path: solved fraction}) and the SFT checkpoint's score: per seed,
    each side's curve (the window's checkpoints, :func:`in_window`), the same read at the marks
    (``marks``), and each run's result with its ``window`` summary (``runs``)."""
    seeds = {}
    for seed, sides in runs.items():
        rec: dict = {"runs": {}, "marks": {}}
        for side, r in sides.items():
            win = in_window(r["checkpoints"], seconds)
            rec[side] = curve(sft, [(c[0], scores[c[1]]) for c in win])
            rec["marks"][side] = at_marks(rec[side], every, seconds)
            rec["runs"][side] = {**r, "window": window_summary(r["checkpoints"], seconds, rows_per_step)}
        seeds[str(seed)] = rec
    sides = sorted({s for rec in seeds.values() for s in rec["marks"]})
    mean = {side: mean_curve([rec["marks"][side] for rec in seeds.values()]) for side in sides}
    return {"seeds": seeds, "mean": mean, "acceptance": acceptance(mean)}
