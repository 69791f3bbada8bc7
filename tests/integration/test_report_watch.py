"""``rlvr report RUN_DIR`` and ``rlvr watch RUN_DIR`` on a tiny collapsing RL run whose entropy floor acts."""

import pytest

from rlvr.config.health import HealthActions
from rlvr.config.model import ModelConfig
from rlvr.trainers.rl import train_rl

from test_cli_sft import rlvr
from test_health_runs import digits_judge, stage


@pytest.fixture(scope="module")
def run(tiny_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    st = stage(0.5, 1e-2, steps=16, actions=HealthActions(entropy_collapse=["entropy_floor"]), track_kl=True)
    train_rl(st, ModelConfig(path=tiny_dir), d, seed=0, judge=digits_judge)
    return d


def test_report_writes_plots_and_prints_the_status_table(run, capsys, monkeypatch):
    from rlvr.commands.report import report_command

    monkeypatch.setenv("COLUMNS", "400")  # one table row a line
    report_command(str(run))
    out = capsys.readouterr().out
    assert "rl: health" in out and "ENTROPY COLLAPSE" in out and "entropy_floor: ENTROPY" in out
    html = (run / "report.html").read_text()
    assert "<img src='data:image/png;base64," in html and "<th>status</th>" in html and "entropy_floor" in html


def test_report_refuses_a_folder_that_is_not_a_run(tmp_path):
    from rlvr.commands.report import report_command
    from rlvr.errors import ConfigError

    with pytest.raises(ConfigError, match="not a run directory"):
        report_command(str(tmp_path))


def test_watch_prints_each_step_with_its_status(run):
    out = rlvr("watch", str(run), "--once").stdout.splitlines()
    steps = [line for line in out if line.startswith("rl step ") and "| status " in line]
    assert len(steps) == 16 and "status healthy" in steps[0]
    assert any("ENTROPY COLLAPSE" in line and "action entropy_floor" in line for line in steps)
    assert out[0].startswith("rl step 0: start")


def test_watch_reads_only_what_was_appended(run):
    from rlvr.commands.report import watch_lines

    offsets: dict = {}
    assert len(watch_lines(run, offsets)) > 16 and watch_lines(run, offsets) == []
