"""``rlvr report RUN_DIR`` (re)writes ``report.html`` and prints the run's tables: the held-out evaluation by
stage (with the stages a time cap cut), then each stage's losses table and, for stages with a health
monitor, its health status table. ``rlvr watch RUN_DIR`` follows a running job: one line per logged step
(loss, pass rate, entropy, KL, zero-variance groups, pair accuracy, held-out results, status, action), the
events, a summary line as each stage finishes, and the held-out table when the run's pipeline is done."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from rlvr.errors import ConfigError


def _run_dir(run_dir: str) -> Path:
    p = Path(run_dir)
    if not p.is_dir() or not any(p.glob("*/metrics.jsonl")):
        raise ConfigError(f"{run_dir}: not a run directory (no <stage>/metrics.jsonl under it)")
    return p


def report_command(run_dir: str = typer.Argument(..., help="Run directory.")) -> None:
    """(Re)write RUN_DIR/report.html (plots, status timeline with actions) and print the held-out table by stage
    and each stage's losses and health tables."""
    from rlvr.commands.run import print_summary
    from rlvr.console import make_console
    from rlvr.monitoring.report import summary_from_run, write_report
    from rlvr.monitoring.status_table import print_status_tables

    p = _run_dir(run_dir)
    console = make_console()
    summary = summary_from_run(p)
    if any(row.get("pass_at_1") is not None or row.get("heldout_pair_accuracy") is not None
           for row in summary["stages"]):
        print_summary(summary, console)
    if not print_status_tables(p, console):
        console.print("(no stage of this run has a health status: SFT and reward-model stages have no monitor)")
    console.print(f"report: {write_report(p, summary)}")


def _done(run_dir: Path) -> bool:
    p = run_dir / "pipeline.json"
    if not p.exists():
        return False
    try:
        st = json.loads(p.read_text(encoding="utf-8")).get("stages", {})
    except json.JSONDecodeError:
        return False
    return bool(st) and all(v.get("status") == "done" for v in st.values()) and (run_dir / "summary.json").exists()


WATCH = [("step", "step"), ("loss", "train/loss"), ("pass_rate", "rollout/pass_rate"),
         ("entropy", "rollout/entropy|policy/entropy"), ("kl_to_ref", "kl/ref"), ("zero_var", "rollout/zero_var_frac"),
         ("pair_acc", "rewards/accuracy"), ("status", "health/status"), ("action", "health/action")]
"""The fields of a step's watch line (those the step logged), then its held-out results."""


def step_line(stage: str, r: dict) -> str:
    """One logged step: ``STAGE step N | loss X | pass_rate Y | ... | held-out pass@1 Z``."""
    from rlvr.monitoring.status_table import cell

    cells = [(name, cell(r, key)) for name, key in WATCH]
    line = f"{stage} " + " | ".join(f"{k} {v}" for k, v in cells if v != "-")
    if "eval/pass_at_1" in r:
        line += f" | held-out pass@1 {r['eval/pass_at_1']:.3f}"
    if "heldout/accuracy" in r:
        line += f" | held-out pair_acc {r['heldout/accuracy']:.3f}"
    return line


def summary_lines(run_dir: Path, offsets: dict) -> list[str]:
    """A line for each stage that finished (its row in summary.json) since the last call (``offsets`` updated)."""
    from rlvr.commands.run import time_cap_text

    p = run_dir / "summary.json"
    try:
        rows = json.loads(p.read_text(encoding="utf-8")).get("stages", []) if p.exists() else []
    except (json.JSONDecodeError, OSError):  # being replaced: read at the next poll
        return []
    seen = offsets.setdefault("_summarised", [])
    out = []
    for row in rows:
        if row.get("stage") in seen:
            continue
        seen.append(row.get("stage"))
        if row.get("pass_at_1") is not None:
            fams = ", ".join(f"{f} {v:.1%}" for f, v in sorted(row.get("by_family", {}).items()))
            res = f"held-out pass@1 {row['pass_at_1']:.1%}" + (f" ({fams})" if fams else "")
        elif row.get("heldout_pair_accuracy") is not None:
            res = f"held-out RM pair accuracy {row['heldout_pair_accuracy']:.1%}"
        else:
            res = "no held-out result"
        out.append(f"{row.get('stage')} done: {res}, {row.get('wall_s', 0):.0f} s, {row.get('checkpoint')}")
        if row.get("time_cap"):
            out.append(time_cap_text(row["stage"], row["time_cap"]))
    return out


def watch_lines(run_dir: Path, offsets: dict) -> list[str]:
    """The lines to print for what was appended to every stage's metrics since ``offsets`` (updated), then a
    summary line for each stage that finished since."""
    from rlvr.monitoring.status_table import stage_metrics

    out = []
    for stage, path in stage_metrics(run_dir):
        with open(path, encoding="utf-8") as f:
            f.seek(offsets.get(str(path), 0))
            chunk = f.read()
        end = chunk.rfind("\n") + 1  # a torn last line waits for the next poll
        offsets[str(path)] = offsets.get(str(path), 0) + len(chunk[:end].encode("utf-8"))
        for line in chunk[:end].splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "event" in r:
                extra = {k: v for k, v in r.items() if k not in ("event", "step", "time")}
                out.append(f"{stage} step {r.get('step')}: {r['event']} {json.dumps(extra) if extra else ''}".rstrip())
                continue
            out.append(step_line(stage, r))
    return out + summary_lines(run_dir, offsets)


def watch_command(run_dir: str = typer.Argument(..., help="Run directory of a running (or finished) job."),
                  interval: float = typer.Option(5.0, "--interval", help="Seconds between polls."),
                  once: bool = typer.Option(False, "--once", help="Print what is there and exit.", metavar="")) -> None:
    """Follow a running job: each logged step's loss, pass rate, entropy, KL, zero-variance groups, health status
    and actions, the evals and events, a summary line per finished stage — until its pipeline is done, then the
    held-out table by stage (Ctrl-C to stop watching)."""
    from rlvr.commands.run import print_summary

    p = Path(run_dir)
    if not p.is_dir():
        raise ConfigError(f"{run_dir}: no such run directory")
    offsets: dict = {}
    while True:
        for line in watch_lines(p, offsets):
            typer.echo(line)
        if _done(p):
            print_summary(json.loads((p / "summary.json").read_text(encoding="utf-8")))
            return
        if once:
            return
        time.sleep(interval)


def register(app: typer.Typer) -> None:
    """Add ``rlvr report`` and ``rlvr watch`` to the CLI app."""
    app.command("report")(report_command)
    app.command("watch")(watch_command)
