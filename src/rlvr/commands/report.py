"""``rlvr report RUN_DIR`` (re)writes ``report.html`` and prints each stage's health status table;
``rlvr watch RUN_DIR`` follows a running job in the terminal: one line per logged step (pass rate, entropy,
KL, zero-variance groups, status, action), evals and events, until the run's pipeline is done."""

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
    """(Re)write RUN_DIR/report.html (plots, status timeline with actions) and print the status tables."""
    from rich.console import Console

    from rlvr.monitoring.report import summary_from_run, write_report
    from rlvr.monitoring.status_table import print_status_tables

    p = _run_dir(run_dir)
    console = Console()
    if not print_status_tables(p, console):
        console.print("(no stage of this run has a health status: SFT and reward-model stages have no monitor)")
    console.print(f"report: {write_report(p, summary_from_run(p))}")


def _done(run_dir: Path) -> bool:
    p = run_dir / "pipeline.json"
    if not p.exists():
        return False
    try:
        st = json.loads(p.read_text(encoding="utf-8")).get("stages", {})
    except json.JSONDecodeError:
        return False
    return bool(st) and all(v.get("status") == "done" for v in st.values()) and (run_dir / "summary.json").exists()


def watch_lines(run_dir: Path, offsets: dict) -> list[str]:
    """The lines to print for what was appended to every stage's metrics since ``offsets`` (updated)."""
    from rlvr.monitoring.status_table import COLUMNS, format_row, stage_metrics

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
            cells = dict(zip([n for n, _ in COLUMNS], format_row(r)))
            line = f"{stage} " + " | ".join(f"{k} {v}" for k, v in cells.items() if v != "-")
            if "eval/pass_at_1" in r:
                line += f" | held-out pass@1 {r['eval/pass_at_1']:.3f}"
            out.append(line)
    return out


def watch_command(run_dir: str = typer.Argument(..., help="Run directory of a running (or finished) job."),
                  interval: float = typer.Option(5.0, "--interval", help="Seconds between polls."),
                  once: bool = typer.Option(False, "--once", help="Print what is there and exit.", metavar="")) -> None:
    """Follow a running job: each logged step's pass rate, entropy, KL, zero-variance groups, health status and
    actions, the evals and events — until its pipeline is done (Ctrl-C to stop watching)."""
    p = Path(run_dir)
    if not p.is_dir():
        raise ConfigError(f"{run_dir}: no such run directory")
    offsets: dict = {}
    while True:
        for line in watch_lines(p, offsets):
            typer.echo(line)
        if once or _done(p):
            return
        time.sleep(interval)


def register(app: typer.Typer) -> None:
    """Add ``rlvr report`` and ``rlvr watch`` to the CLI app."""
    app.command("report")(report_command)
    app.command("watch")(watch_command)
