"""The health status table of a stage (``rlvr report`` prints it; ``rlvr watch`` prints it as it grows).

    step | pass_rate | entropy | kl_to_ref | zero_var | status | action

Rows: the first and the last step, every step where the status changed or an action fired, and evenly
spaced steps up to ``max_rows``.
"""

from __future__ import annotations

from pathlib import Path

from rlvr.monitoring.metrics import read_metrics

COLUMNS = [("step", "step"), ("pass_rate", "rollout/pass_rate"), ("entropy", "rollout/entropy|policy/entropy"),
           ("kl_to_ref", "kl/ref"), ("zero_var", "rollout/zero_var_frac"), ("status", "health/status"),
           ("action", "health/action")]


def cell(rec: dict, keys: str) -> str:
    for k in keys.split("|"):
        v = rec.get(k)
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, float):
            return f"{v:.3f}"
        return str(v)
    return "-"


def status_rows(records: list[dict], max_rows: int = 16) -> list[dict]:
    """The rows of the status table (see the module docstring)."""
    recs = [r for r in records if "event" not in r and "health/status" in r]
    if not recs:
        return []
    keep = {0, len(recs) - 1}
    for i in range(1, len(recs)):
        if recs[i]["health/status"] != recs[i - 1]["health/status"] or "health/action" in recs[i]:
            keep.add(i)
    spare = max(0, max_rows - len(keep))
    if spare:
        keep |= {round(j * (len(recs) - 1) / (spare + 1)) for j in range(1, spare + 1)}
    return [recs[i] for i in sorted(keep)]


def format_row(rec: dict) -> list[str]:
    return [cell(rec, k) for _, k in COLUMNS]


def stage_metrics(run_dir: str | Path) -> list[tuple[str, Path]]:
    """(stage, metrics.jsonl) of every stage of a run, in the order the stages ran."""
    run_dir = Path(run_dir)
    found = [(p.parent.name, p) for p in run_dir.glob("*/metrics.jsonl")]
    first = {name: _first_time(p) for name, p in found}
    return sorted(found, key=lambda x: first[x[0]])


def _first_time(path: Path) -> float:
    for r in read_metrics(path):
        return float(r.get("time", 0.0))
    return 0.0


def print_status_tables(run_dir: str | Path, console, max_rows: int = 16) -> int:
    """Print each stage's status table; returns the number of stages with a health status."""
    from rich.table import Table

    n = 0
    for stage, path in stage_metrics(run_dir):
        rows = status_rows(read_metrics(path), max_rows)
        if not rows:
            continue
        n += 1
        t = Table(title=f"{stage}: health")
        for name, _ in COLUMNS:
            t.add_column(name, justify="left" if name in ("status", "action") else "right", overflow="fold")
        for r in rows:
            cells = format_row(r)
            style = "red" if r.get("health/code") == 2 else "yellow" if r.get("health/code") == 1 else None
            t.add_row(*cells, style=style)
        console.print(t)
    return n
