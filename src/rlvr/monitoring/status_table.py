"""A stage's tables as ``rlvr report`` prints them (``rlvr watch`` prints their rows as they grow).

The health status table (stages with a health monitor)::

    step | pass_rate | entropy | kl_to_ref | zero_var | status | action

Rows: the first and the last step, every step where the status changed or an action fired, and evenly
spaced steps up to ``max_rows``.

The losses table (every stage): step, loss, grad norm, lr and the stage's own training figures (pass rate and
reward, pair accuracy and margin, KL), the held-out results and the training minutes — only the columns the
stage logged. Rows: the first and the last logged step, every step with a held-out result, and evenly spaced
steps up to ``max_rows``.
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


LOSS_COLUMNS = [("step", "step"), ("loss", "train/loss"), ("grad_norm", "train/grad_norm"), ("lr", "train/lr"),
                ("pass_rate", "rollout/pass_rate"), ("reward", "reward/mean"), ("pair_acc", "rewards/accuracy"),
                ("margin", "rewards/margin"), ("kl_to_ref", "kl/ref"), ("held-out pass@1", "eval/pass_at_1"),
                ("held-out pair_acc", "heldout/accuracy"), ("minutes", "perf/minutes")]
HELD_OUT = ("eval/pass_at_1", "heldout/accuracy")


def loss_cell(rec: dict, key: str) -> str:
    """A losses-table cell: the learning rate in scientific notation, held-out results as percentages."""
    v = rec.get(key)
    if key == "train/lr" and isinstance(v, (int, float)):
        return f"{v:.2e}"
    if key in HELD_OUT and isinstance(v, (int, float)):
        return f"{v:.1%}"
    return cell(rec, key)


def loss_rows(records: list[dict], max_rows: int = 12) -> tuple[list[str], list[list[str]]]:
    """``(column names, rows)`` of the losses table (see the module docstring)."""
    recs = [r for r in records if "event" not in r and any(k in r for _, k in LOSS_COLUMNS[1:4] + LOSS_COLUMNS[9:11])]
    if not recs:
        return [], []
    keep = {0, len(recs) - 1} | {i for i, r in enumerate(recs) if any(k in r for k in HELD_OUT)}
    spare = max(0, max_rows - len(keep))
    if spare:
        keep |= {round(j * (len(recs) - 1) / (spare + 1)) for j in range(1, spare + 1)}
    rows = [recs[i] for i in sorted(keep)]
    cols = [(n, k) for n, k in LOSS_COLUMNS if k == "step" or any(isinstance(r.get(k), (int, float)) for r in rows)]
    return [n for n, _ in cols], [[loss_cell(r, k) for _, k in cols] for r in rows]


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
    """Print each stage's losses table and (stages with a monitor) its health status table; returns the
    number of stages with a health status."""
    n = 0
    for stage, path in stage_metrics(run_dir):
        records = read_metrics(path)
        print_loss_table(stage, records, console)
        n += print_health_table(stage, records, console, max_rows)
    return n


def print_loss_table(stage: str, records: list[dict], console, max_rows: int = 12) -> bool:
    """Print the stage's losses table (False when it logged no training step)."""
    from rich.table import Table

    names, rows = loss_rows(records, max_rows)
    if not rows:
        return False
    t = Table(title=f"{stage}: losses")
    for name in names:
        t.add_column(name, justify="right")
    for r in rows:
        t.add_row(*r)
    console.print(t)
    return True


def print_health_table(stage: str, records: list[dict], console, max_rows: int = 16) -> bool:
    """Print the stage's health status table (False when it has no health status)."""
    from rich.table import Table

    rows = status_rows(records, max_rows)
    if not rows:
        return False
    t = Table(title=f"{stage}: health")
    for name, _ in COLUMNS:
        t.add_column(name, justify="left" if name in ("status", "action") else "right", overflow="fold")
    for r in rows:
        cells = format_row(r)
        style = "red" if r.get("health/code") == 2 else "yellow" if r.get("health/code") == 1 else None
        t.add_row(*cells, style=style)
    console.print(t)
    return True
