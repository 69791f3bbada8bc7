"""The table of a sweep (``rlvr sweep``): each run's figures read from its run directory, the grid's means,
per-seed values and paired 95% intervals, written as ``sweep.json``, ``sweep.md`` and ``sweep.png``.

A run's held-out figure is its own evaluation: the table's metric (greedy ``pass_at_1`` by default; or a sampled
``pass_at_K_sampled``, or the scorer's ``mean_score``) of the last stage row of its ``summary.json`` that has
one (the equal-time SFT control's rows and the starting model's ``base`` row are not stages of the recipe's
result). The end-of-run training health is the last logged value, in the last stage whose ``metrics.jsonl`` logs
``rollout/zero_var_frac`` (an RL stage), of ``rollout/zero_var_frac`` (fraction of groups whose rewards are all
equal), ``rollout/entropy`` (else ``policy/entropy``; nats per token) and ``kl/ref`` (absent when the stage logs
no KL to a reference); over all its steps, the mean share of sampled completions cut at the token budget
(``rollout/truncation_rate``, column ``cut``) and their mean length in tokens (``rollout/length_mean``). Compute
is the stages' training seconds (``train_s``, held-out evaluations excluded), the sequences that RL stage trained
on (``train/sequences`` summed over its steps) and the groups it sampled (``rollout/groups_drawn`` summed: dynamic
sampling draws more than it trains).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from rlvr.data.jsonl import write_json_atomic, write_text_atomic
from rlvr.monitoring.intervals import paired_interval

METRICS = re.compile(r"^(pass_at_1|pass_at_[0-9]+_sampled|mean_score)$")
"""The held-out figures a sweep can table: those a stage row of ``summary.json`` holds."""

MARKER = "sweep_cell.json"
"""Written into a run directory by the sweep once its run finished: the cell's values, seed, wall time and
whether it ran alone."""

HEALTH_KEYS = {"zero_var_frac": ("rollout/zero_var_frac",), "entropy": ("rollout/entropy", "policy/entropy"),
               "kl": ("kl/ref",)}
"""Table column -> the metric keys it reads (the first one logged), from the last RL stage's metrics.jsonl."""

RUN_MEAN_KEYS = {"truncated": "rollout/truncation_rate", "length": "rollout/length_mean"}
"""Table column -> the metric it averages over every step of the last RL stage (what the budget cut, and how long
the samples ran: the figures of a length-control method)."""


def read_run(run_dir: Path, stage_names: list[str]) -> dict:
    """One run's figures: ``pass_at_1`` and ``stage`` (its evaluation), ``steps`` and ``train_s`` (summed over
    the recipe's stages), ``time_cap`` (a stage its time cap cut), the end-of-run health, ``sequences``, ``wall_s``
    (the stages' wall-clock seconds, their held-out evaluations included, imports and loading not) and ``alone``
    (from the sweep's marker: the cell ran start to end with no other cell beside it)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [r for r in summary["stages"] if r["stage"] in stage_names]
    scored = [r for r in rows if r.get("pass_at_1") is not None]
    figures = {k: v for k, v in scored[-1].items() if METRICS.match(k)} if scored else {}
    marker = json.loads((run_dir / MARKER).read_text()) if (run_dir / MARKER).exists() else {}
    out = {"pass_at_1": scored[-1]["pass_at_1"] if scored else None, "stage": scored[-1]["stage"] if scored else None,
           "steps": sum(r.get("steps", 0) for r in rows), "train_s": round(sum(r.get("train_s", 0.0) for r in rows), 2),
           "time_cap": any(r.get("time_cap") for r in rows), "wall_s": round(sum(r.get("wall_s", 0.0) for r in rows), 2),
           "alone": bool(marker.get("alone")), "figures": figures}
    out.update(rl_health(run_dir, stage_names))
    out["curve"] = heldout_curve(run_dir, stage_names)
    return out


def _records(path: Path) -> list[dict]:
    return [r for r in (json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()) if "event" not in r]


def heldout_curve(run_dir: Path, stage_names: list[str]) -> list[list] | None:
    """``[[step, pass@1], ...]``: the held-out evaluations (``eval/pass_at_1``) of the last stage that logs them,
    in the order logged; None when no stage does (``eval_every: 0``)."""
    for name in reversed(stage_names):
        path = run_dir / name / "metrics.jsonl"
        if path.exists():
            curve = [[r["step"], r["eval/pass_at_1"]] for r in _records(path) if "eval/pass_at_1" in r]
            if curve:
                return curve
    return None


def mean_curve(curves: dict[str, list[list] | None]) -> dict | None:
    """Seed means of held-out curves at the steps every seed with a curve evaluated (a seed that stopped early
    shortens the curve rather than biasing its tail): ``steps``, ``mean``, ``per_seed``; None without curves."""
    got = {s: dict((step, v) for step, v in c) for s, c in curves.items() if c}
    if not got:
        return None
    steps = sorted(set.intersection(*(set(c) for c in got.values())))
    return {"steps": steps, "mean": [sum(c[t] for c in got.values()) / len(got) for t in steps],
            "per_seed": {s: [c[t] for t in steps] for s, c in got.items()}}


def rl_health(run_dir: Path, stage_names: list[str]) -> dict:
    """The end-of-run health of the last stage whose metrics log ``rollout/zero_var_frac`` (see the module)."""
    for name in reversed(stage_names):
        path = run_dir / name / "metrics.jsonl"
        if not path.exists():
            continue
        recs = _records(path)
        if not any("rollout/zero_var_frac" in r for r in recs):
            continue
        out: dict = {"rl_stage": name, "sequences": int(sum(r.get("train/sequences", 0) for r in recs)),
                     "groups_drawn": int(sum(r.get("rollout/groups_drawn", 0) for r in recs)) or None}
        for col, keys in HEALTH_KEYS.items():
            key = next((k for k in keys if any(k in r for r in recs)), None)
            out[col] = next(r[key] for r in reversed(recs) if key in r) if key else None
            out[f"{col}_key"] = key
        for col, key in RUN_MEAN_KEYS.items():
            out[col] = _mean([r.get(key) for r in recs])
        return out
    return {"rl_stage": None, "sequences": None, "groups_drawn": None, **{c: None for c in HEALTH_KEYS},
            **{c: None for c in RUN_MEAN_KEYS}}


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def metric_label(metric: str) -> str:
    """``pass@1``, ``pass@8 (sampled)``, ``mean score``: how a table names its metric."""
    m = re.match(r"^pass_at_([0-9]+)(_sampled)?$", metric)
    return f"pass@{m.group(1)}{' (sampled)' if m.group(2) else ''}" if m else metric.replace("_", " ")


def figure(run: dict, metric: str) -> float | None:
    """A run's held-out ``metric`` (``pass_at_1`` also from a run read without figures)."""
    return run.get("figures", {}).get(metric, run.get("pass_at_1") if metric == "pass_at_1" else None)


def build_table(keys: list[str], values: list[list[str]], seeds: list[int], runs: dict,
                metric: str = "pass_at_1") -> dict:
    """The sweep's table. ``runs``: ``(point, seed) -> read_run(...)`` for the finished runs, a point being the
    tuple of each key's value. Per point: ``per_seed`` values of ``metric`` (:data:`METRICS`), their ``mean``, for each key whose value is not the
    key's first the paired difference to the point with the first value (same other values; pairs by seed) and
    its t-interval (:func:`rlvr.monitoring.intervals.paired_interval`), the seed means of the health and compute
    columns, and ``wall_comparable`` (every seed's run ran alone)."""
    import itertools

    cells = []
    for point in itertools.product(*values):
        got = {s: runs.get((point, s)) for s in seeds}
        done = [r for r in got.values() if r is not None]
        per_seed = {str(s): (figure(r, metric) if r else None) for s, r in got.items()}
        cell = {"values": dict(zip(keys, point)), "per_seed": per_seed, "mean": _mean(list(per_seed.values())),
                "runs": len(done), "vs_first": {}}
        for i, key in enumerate(keys):
            if point[i] == values[i][0]:
                continue
            ref = (*point[:i], values[i][0], *point[i + 1:])
            pairs = [(figure(got[s], metric), figure(runs[(ref, s)], metric)) for s in seeds
                     if got[s] is not None and runs.get((ref, s)) is not None]
            pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
            diffs = [a - b for a, b in pairs]
            cell["vs_first"][key] = {"reference": values[i][0], "diffs": diffs, **paired_interval(diffs)}
        for col in ("zero_var_frac", "entropy", "kl", *RUN_MEAN_KEYS, "steps", "train_s", "sequences", "groups_drawn"):
            cell[col] = _mean([r.get(col) for r in done])
        cell["steps_per_seed"] = {str(s): r["steps"] for s, r in got.items() if r}
        cell["wall_s"] = _mean([r.get("wall_s") for r in done])
        cell["wall_comparable"] = bool(done) and all(r["alone"] for r in done)
        cell["time_cap"] = any(r["time_cap"] for r in done)
        cell["curve"] = mean_curve({str(s): r.get("curve") for s, r in got.items() if r})
        cells.append(cell)
    return {"keys": keys, "values": values, "seeds": seeds, "metric": metric, "cells": cells}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _delta(d: dict | None) -> str:
    """A paired difference in percentage points with its 95% interval (or why there is none)."""
    if d is None:
        return "(reference)"
    if d["mean"] is None:
        return "-"
    if d["half_width"] is None:
        return f"{100 * d['mean']:+.1f} ({d['note']})"
    return f"{100 * d['mean']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def markdown(table: dict) -> str:
    """The table as markdown: one row per grid point."""
    keys, seeds = table["keys"], table["seeds"]
    head = [*(f"`{k}`" for k in keys), f"{metric_label(table.get('metric', 'pass_at_1'))} mean", f"per seed ({', '.join(map(str, seeds))})",
            *(f"Δ vs `{k}={v[0]}` (pp, 95% CI)" for k, v in zip(keys, table["values"])),
            "zero-var", "entropy", "KL", "cut", "length", "steps", "train s", "trained seqs", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in table["cells"]:
        wall = _num(c["wall_s"], ".0f")
        row = [*c["values"].values(), _pct(c["mean"]), " / ".join(_pct(v) for v in c["per_seed"].values()),
               *(_delta(c["vs_first"].get(k)) for k in keys), _num(c["zero_var_frac"], ".2f"),
               _num(c["entropy"]), _num(c["kl"], ".4f"), _pct(c.get("truncated")), _num(c.get("length"), ".1f"),
               _num(c["steps"], ".0f") + (" (time cap)" if c["time_cap"] else ""),
               _num(c["train_s"], ".1f"), _num(c["sequences"], ".0f"), wall if c["wall_comparable"] or wall == "-" else wall + "*"]
        lines.append("| " + " | ".join(str(x) for x in row) + " |")
    return "\n".join(lines) + "\n"


def plot(table: dict, path: Path) -> Path | None:
    """``sweep.png``: left, each grid point's mean pass@1 with its per-seed values; right, each paired difference
    to a key's first value with its 95% interval. None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    cells = table["cells"]
    labels = [" / ".join(c["values"].values()) or "recipe" for c in cells]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 0.6 * len(cells) + 2.2))
    for y, c in enumerate(cells):
        pts = [100 * v for v in c["per_seed"].values() if v is not None]
        ax.scatter(pts, [y] * len(pts), color="tab:gray", s=18, zorder=2)
        if c["mean"] is not None:
            ax.scatter([100 * c["mean"]], [y], color="tab:blue", marker="D", s=40, zorder=3)
    ax.set_yticks(range(len(cells)), labels)
    ax.set_xlabel(f"held-out {metric_label(table.get('metric', 'pass_at_1'))} (%): seeds (grey), mean (blue)")
    ax.invert_yaxis()
    rows = [(_vs_label(c, k, d), d) for c in cells for k, d in c["vs_first"].items()]
    for y, (_, d) in enumerate(rows):
        if d["mean"] is None:
            continue
        err = [[100 * d["half_width"]], [100 * d["half_width"]]] if d["half_width"] is not None else None
        bx.errorbar([100 * d["mean"]], [y], xerr=err, fmt="o", color="tab:orange", capsize=4)
    bx.axvline(0, color="black", lw=0.8)
    bx.set_yticks(range(len(rows)), [lab for lab, _ in rows])
    bx.set_xlabel("paired difference to the first value (pp), 95% t-interval")
    bx.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_curves(table: dict, path: Path) -> Path | None:
    """``sweep_curves.png``: each grid point's held-out pass@1 against the step (seed mean, thick; seeds, thin):
    where the curves flatten says whether the sweep's step count was enough. None without matplotlib or when no
    cell logged a held-out curve of two points or more."""
    cells = [c for c in table["cells"] if c.get("curve") and len(c["curve"]["steps"]) > 1]
    if not cells:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, c in enumerate(cells):
        color, cur = f"C{i % 10}", c["curve"]
        for ys in cur["per_seed"].values():
            ax.plot(cur["steps"], [100 * y for y in ys], color=color, lw=0.6, alpha=0.35)
        ax.plot(cur["steps"], [100 * y for y in cur["mean"]], color=color, lw=2,
                label=" / ".join(c["values"].values()) or "recipe")
    ax.set_xlabel("step")
    ax.set_ylabel("held-out pass@1 (%)")
    ax.set_title("held-out curves: seed mean (thick), seeds (thin)")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _vs_label(cell: dict, key: str, d: dict) -> str:
    """``loss.type: dr_grpo vs grpo (1e-5)``: the key's last two parts, the two values, the other keys' values."""
    others = [v for k, v in cell["values"].items() if k != key]
    return (f"{'.'.join(key.split('.')[-2:])}: {cell['values'][key]} vs {d['reference']}"
            + (f" ({', '.join(others)})" if others else ""))


def write_table(out_dir: Path, table: dict, header: str) -> dict[str, str]:
    """Write ``sweep.json`` (the table, with ``header``), ``sweep.md`` (``header`` then the markdown table) and
    ``sweep.png``; returns their paths."""
    write_json_atomic(out_dir / "sweep.json", table)
    write_text_atomic(out_dir / "sweep.md", header + "\n\n" + markdown(table))
    png = plot(table, out_dir / "sweep.png")
    curves = plot_curves(table, out_dir / "sweep_curves.png")
    return {"json": str(out_dir / "sweep.json"), "markdown": str(out_dir / "sweep.md"),
            **({"plot": str(png)} if png else {}), **({"curves": str(curves)} if curves else {})}
