"""Run the adversarial probe suite: setup -> verify -> host check, one row per probe.

A row is ``ok`` when the hack earned reward 0, its outcome is one the probe expects, and the host
check found nothing (a file outside the temp dir, a surviving process, a reached socket, a changed
database). ``flaky=True`` verifies the same completion twice and reports disagreements (both runs
must still be ok). Probe families are imported lazily: a family whose module (or verifier) is
missing is skipped with a note.
"""

from __future__ import annotations

import importlib
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.verifiers.base import Verdict, Verifier
from rlvr.verifiers.probes.base import Probe

KINDS: tuple[str, ...] = ("math", "sql", "code", "env", "reasoning_gym")


@dataclass
class ProbeRow:
    """The result of one probe (``second`` is the repeat verdict under ``--flaky``)."""

    probe: str
    kind: str
    outcome: str
    reward: float
    expected: tuple[str, ...]
    host_effects: list[str] = field(default_factory=list)
    seconds: float = 0.0
    reason: str = ""
    second: tuple[str, float] | None = None

    @property
    def disagrees(self) -> bool:
        return self.second is not None and self.second != (self.outcome, self.reward)

    @property
    def ok(self) -> bool:
        runs = [(self.outcome, self.reward)] + ([self.second] if self.second else [])
        return not self.host_effects and all(r == 0 and o in self.expected for o, r in runs)


def collect_probes(kind: str = "all") -> tuple[list[Probe], list[str]]:
    """Probes of one kind (or ``all``) and notes about families that could not be loaded."""
    kinds = KINDS if kind == "all" else (kind,)
    if any(k not in KINDS for k in kinds):
        raise ValueError(f"unknown probe kind {kind!r}; expected one of {list(KINDS) + ['all']}")
    probes: list[Probe] = []
    notes: list[str] = []
    for k in kinds:
        try:
            mod = importlib.import_module(f"rlvr.verifiers.probes.{k}")
        except ImportError as e:
            notes.append(f"{k} probes skipped: rlvr.verifiers.probes.{k} is not available ({e})")
            continue
        found = list(getattr(mod, "PROBES", []))
        if not found:
            notes.append(f"{k} probes skipped: rlvr.verifiers.probes.{k} defines no PROBES")
        probes.extend(found)
    return probes, notes


class _Verifiers:
    """One verifier per (kind, options), shared by the probes that ask for the same."""

    def __init__(self) -> None:
        self._cache: dict[str, Verifier] = {}

    def get(self, probe: Probe) -> Verifier:
        from rlvr.verifiers.registry import get_verifier

        key = f"{probe.kind}:{sorted(probe.verifier_options.items())!r}"
        if key not in self._cache:
            self._cache[key] = get_verifier(probe.kind, **probe.verifier_options)
        return self._cache[key]

    def close(self) -> None:
        for v in self._cache.values():
            close = getattr(v, "close", None)
            if callable(close):
                close()


def _verify(verifier: Verifier, probe: Probe) -> Verdict:
    t0 = time.perf_counter()
    try:
        return verifier.verify(probe.task, probe.completion)
    except Exception as e:  # noqa: BLE001 - a verifier that raises is reported, not fatal
        return Verdict.infra(f"verifier raised {type(e).__name__}: {e}", time.perf_counter() - t0)


def run_probe(probe: Probe, verifiers: _Verifiers | None = None, flaky: bool = False) -> ProbeRow:
    """Run one probe: setup, verify (twice with ``flaky``), host check."""
    own = verifiers is None
    verifiers = verifiers or _Verifiers()
    try:
        with tempfile.TemporaryDirectory(prefix=f"rlvr-probe-{probe.kind}-") as workdir:
            state: Any = probe.setup(workdir) if probe.setup else None
            verifier: Verifier | None = None
            try:
                verifier = verifiers.get(probe)
            except Exception as e:  # noqa: BLE001 - e.g. the verifier's module is missing
                v = Verdict.infra(f"no verifier: {e}")
            else:
                v = _verify(verifier, probe)
            second = None
            if flaky and verifier is not None:
                v2 = _verify(verifier, probe)
                second = (v2.outcome, v2.reward)
            effects = list(probe.host_check(state)) if probe.host_check else []
    finally:
        if own:
            verifiers.close()
    reason = str(v.details.get("reason") or v.details.get("error") or "")
    return ProbeRow(probe.name, probe.kind, v.outcome, v.reward, tuple(probe.expected), effects,
                    v.seconds, reason, second)


def run_probes(kind: str = "all", flaky: bool = False, progress: Any = None) -> tuple[list[ProbeRow], list[str]]:
    """Run every probe of ``kind``; returns rows and notes (skipped families, disagreements)."""
    probes, notes = collect_probes(kind)
    verifiers = _Verifiers()
    rows = []
    try:
        for i, p in enumerate(probes):
            rows.append(run_probe(p, verifiers, flaky))
            if progress is not None:
                progress(i + 1, len(probes))
    finally:
        verifiers.close()
    notes += [f"{r.kind}/{r.probe}: the two runs disagree ({r.outcome}, {r.reward:g}) vs "
              f"({r.second[0]}, {r.second[1]:g})" for r in rows if r.disagrees and r.second]
    return rows, notes


def exit_code(rows: Sequence[ProbeRow]) -> int:
    """1 when any probe is not ok (reward > 0, unexpected outcome, host touched), else 0."""
    return 0 if all(r.ok for r in rows) else 1


def print_table(rows: Sequence[ProbeRow], notes: Sequence[str], console: Any = None, flaky: bool = False) -> None:
    """Print the probe table (probe, outcome, reward, expected, host effects, ok) with rich."""
    from rich.table import Table

    from rlvr.console import make_console

    console = console or make_console()
    table = Table(title="rlvr probe", show_lines=False)
    for col in ("kind", "probe", "outcome", "reward", "expected", "host effects", "ok", "s"):
        table.add_column(col, no_wrap=col not in ("expected", "host effects"), overflow="fold")
    if flaky:
        table.add_column("repeat")
    for r in rows:
        cells = [r.kind, r.probe, r.outcome, f"{r.reward:g}", "/".join(r.expected),
                 "; ".join(r.host_effects) or "-", "[green]ok[/]" if r.ok else "[red]FAIL[/]", f"{r.seconds:.2f}"]
        if flaky:
            cells.append("-" if r.second is None else
                         ("[red]" if r.disagrees else "") + f"{r.second[0]} {r.second[1]:g}" + ("[/]" if r.disagrees else ""))
        table.add_row(*cells)
    console.print(table)
    for n in notes:
        console.print(f"[yellow]note:[/] {n}")
    bad = [r for r in rows if not r.ok]
    summary = f"{len(rows) - len(bad)}/{len(rows)} probes ok"
    console.print(f"[green]{summary}[/]" if not bad else f"[red]{summary}; failed: "
                  + ", ".join(f"{r.kind}/{r.probe}" for r in bad) + "[/]")
