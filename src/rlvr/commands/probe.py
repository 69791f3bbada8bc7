"""``rlvr probe [code|math|sql|env|all] [--flaky]``: run the adversarial suite, print the table.

Exit status 1 when any hack earns reward > 0, gets an outcome its probe does not expect, or touches
the host (see :mod:`rlvr.verifiers.probes.runner`).
"""

from __future__ import annotations

from typing import Any

import typer

from rlvr.errors import ConfigError
from rlvr.verifiers.probes.runner import KINDS, exit_code, print_table, run_probes


def run_probe(kind: str = "all", flaky: bool = False, console: Any = None) -> int:
    """Run the probes of ``kind``, print the table and notes; returns the exit status."""
    from rich.console import Console

    if kind not in KINDS + ("all",):
        raise ConfigError(f"unknown probe kind {kind!r}; expected one of {', '.join(KINDS + ('all',))}")
    console = console or Console()
    with console.status(f"running {kind} probes..."):
        rows, notes = run_probes(kind, flaky=flaky)
    if not rows:
        notes.append(f"no {kind} probes could be run")
    print_table(rows, notes, console, flaky=flaky)
    return exit_code(rows) if rows else 1


def probe_command(
    kind: str = typer.Argument("all", help="Which probes: code, math, sql, env or all."),
    flaky: bool = typer.Option(False, "--flaky", help="Verify every probe twice and report disagreements.", metavar=""),
) -> None:
    """Run the built-in reward-hack probes against the verifiers; exit 1 if any hack succeeds."""
    code = run_probe(kind, flaky)
    if code:
        raise SystemExit(code)  # not typer.Exit: the app runs with standalone_mode=False


def register(app: typer.Typer) -> None:
    """Add ``rlvr probe`` to the CLI app."""
    app.command("probe")(probe_command)
