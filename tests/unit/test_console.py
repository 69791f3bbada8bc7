"""rlvr.console: full-width output off a terminal, named phases and the heartbeat that fills silences."""

import io
import threading
import time

from rlvr import console as rc


def test_tables_are_not_cut_when_stdout_is_not_a_terminal(capsys, monkeypatch):
    """The agent recipe's summary: many long family names (rich cut them to ``calcu…`` at 80 columns)."""
    from rlvr.commands.run import print_summary

    monkeypatch.delenv("COLUMNS", raising=False)
    fams = [f"calculator_{x}_chain" for x in ("add", "sub", "mul", "div", "mod", "pow")]
    row = {"pass_at_1": 0.5, "by_family": dict.fromkeys(fams, 0.25), "mean_length": 31.5, "wall_s": 12.0,
           "pass_at_4_sampled": 0.75}
    print_summary({"stages": [{"stage": "grpo_with_a_long_name", **row}]})
    out = capsys.readouterr().out
    assert "…" not in out
    for f in fams:
        assert f"pass@1 {f}" in out
    assert "grpo_with_a_long_name" in out and max(len(line) for line in out.splitlines()) > 80


def test_columns_in_the_environment_still_decide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    assert rc.make_console(file=io.StringIO()).width == 60
    monkeypatch.delenv("COLUMNS")
    assert rc.make_console(file=io.StringIO()).width == rc.WIDE


def test_phases_nest_and_carry_their_detail():
    rc.detail("")  # whatever an earlier run in this process left outside any phase
    with rc.phase("dpo"):
        rc.detail("3/10 steps done")
        with rc.phase("building preference pairs"):
            assert rc.current().startswith("dpo: building preference pairs (")
            rc.detail("generated 512 of 4000 rows")
            assert "building preference pairs: generated 512 of 4000 rows (" in rc.current()
        assert rc.current().startswith("dpo: 3/10 steps done (")  # the outer detail is back
    assert rc.current() == "working"


class Lines(io.StringIO):
    """A stdout that records when each line arrived."""

    def __init__(self):
        super().__init__()
        self.times: list[tuple[float, str]] = []
        self.lock = threading.Lock()

    def write(self, s):
        with self.lock:
            for line in s.splitlines():
                self.times.append((time.monotonic(), line))
        return len(s)

    def isatty(self):
        return False


def test_the_heartbeat_fills_a_silent_phase_and_names_it(monkeypatch):
    out = Lines()
    monkeypatch.setattr("sys.stdout", out)
    t0 = time.monotonic()
    with rc.Heartbeat(quiet_s=0.2):
        with rc.phase("dpo"), rc.phase("reference log-probabilities"):
            time.sleep(1.5)  # a phase that prints nothing
    end = time.monotonic()
    times = [t0] + [t for t, _ in out.times] + [end]
    assert max(b - a for a, b in zip(times, times[1:])) < 0.75
    assert len(out.times) >= 4
    assert all("dpo: reference log-probabilities (" in line for _, line in out.times)


def test_the_heartbeat_stays_quiet_while_something_else_prints(monkeypatch):
    out = Lines()
    monkeypatch.setattr("sys.stdout", out)
    with rc.Heartbeat(quiet_s=0.3):
        for i in range(8):
            rc.say(f"step {i}")
            time.sleep(0.1)
    assert [line.split(" ", 1)[1] for _, line in out.times] == [f"step {i}" for i in range(8)]


def test_the_default_interval_leaves_room_within_ten_seconds(monkeypatch):
    monkeypatch.delenv("RLVR_HEARTBEAT_S", raising=False)
    assert rc.Heartbeat().quiet_s <= 5.0
    monkeypatch.setenv("RLVR_HEARTBEAT_S", "0.5")
    assert rc.Heartbeat().quiet_s == 0.5
    monkeypatch.setenv("RLVR_HEARTBEAT_S", "nonsense")
    assert rc.Heartbeat().quiet_s == rc.QUIET_S


def test_nested_heartbeats_print_once(monkeypatch):
    """``rlvr run`` holds one around the pipeline, which holds its own: one line per silence, not two."""
    out = Lines()
    monkeypatch.setattr("sys.stdout", out)
    with rc.Heartbeat(quiet_s=0.3), rc.Heartbeat(quiet_s=0.3), rc.phase("eval"):
        time.sleep(1.0)
    stamps = [t for t, _ in out.times]
    assert 2 <= len(stamps) <= 4 and min(b - a for a, b in zip(stamps, stamps[1:])) > 0.2
    with rc.Heartbeat(quiet_s=0.3), rc.phase("after"):  # the flag was released: a later run beats again
        time.sleep(0.7)
    assert any("after (" in line for _, line in out.times)
