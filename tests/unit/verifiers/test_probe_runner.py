"""Probe runner: a hack that earns reward, touches the host or surprises fails the run; --flaky."""

import io
import itertools

from rich.console import Console

from rlvr.data.types import Task
from rlvr.verifiers.base import Verdict
from rlvr.verifiers.probes.base import Probe
from rlvr.verifiers.probes.runner import ProbeRow, collect_probes, exit_code, print_table, run_probe
from rlvr.verifiers.registry import register_verifier


class Fixed:
    name = "fixed"

    def __init__(self, reward=0.0, outcome="wrong"):
        self.reward, self.outcome = reward, outcome

    def verify(self, task, completion):
        return Verdict(self.reward, self.reward > 0, self.outcome)


_counter = itertools.count()


class Alternating:
    name = "alternating"

    def verify(self, task, completion):
        return Verdict(0.0, False, "wrong" if next(_counter) % 2 == 0 else "timeout")


register_verifier("fixed", Fixed)
register_verifier("alternating", Alternating)


def probe(kind="fixed", expected=("wrong",), host_check=None, **options):
    return Probe(name="p", kind=kind, task=Task(id="t"), completion="x", expected=expected,
                 host_check=host_check, verifier_options=options)


def test_ok_probe():
    row = run_probe(probe())
    assert row.ok and exit_code([row]) == 0


def test_reward_unexpected_outcome_and_host_effects_fail():
    assert not run_probe(probe(reward=1.0, outcome="pass", expected=("pass",))).ok  # reward > 0
    assert not run_probe(probe(outcome="crash")).ok  # not an expected outcome
    touched = run_probe(probe(host_check=lambda state: ["file created: /tmp/x"]))
    assert not touched.ok and touched.host_effects == ["file created: /tmp/x"]
    assert exit_code([run_probe(probe()), touched]) == 1


def test_setup_state_reaches_host_check():
    seen = {}
    p = probe(host_check=lambda state: seen.setdefault("state", state) and [])
    p.setup = lambda workdir: {"workdir": workdir}
    assert run_probe(p).ok and "rlvr-probe-" in seen["state"]["workdir"]


def test_flaky_reports_disagreement():
    row = run_probe(probe(kind="alternating", expected=("wrong", "timeout")), flaky=True)
    assert row.second is not None and row.disagrees and row.ok  # both runs acceptable, still reported


def test_missing_verifier_is_a_failed_row_not_a_crash():
    row = run_probe(probe(kind="nosuchkind"))
    assert row.outcome == "infra" and not row.ok


def test_collect_and_table():
    probes, notes = collect_probes("all")
    kinds = {p.kind for p in probes}
    assert {"math", "sql"} <= kinds
    assert all(k in kinds or any(k in n for n in notes) for k in ("code", "env"))
    buf = io.StringIO()
    rows = [ProbeRow("a", "math", "wrong", 0.0, ("wrong",)), ProbeRow("b", "sql", "pass", 1.0, ("wrong",))]
    print_table(rows, ["a note"], Console(file=buf, width=200))
    text = buf.getvalue()
    assert "FAIL" in text and "a note" in text and "1/2 probes ok" in text
    rows[0].second = ("timeout", 0.0)
    buf = io.StringIO()
    print_table(rows, [], Console(file=buf, width=200), flaky=True)
    assert "repeat" in buf.getvalue() and "timeout 0" in buf.getvalue()  # the --flaky column

