"""save_every_s: checkpoints at wall-clock marks of the process's age, each logged with its reading."""

import json
import time
from pathlib import Path

import pytest

from rlvr.config.data import BuiltinArithmetic
from rlvr.config.model import ModelConfig
from rlvr.config.rl import RLStage, SamplingConfig
from rlvr.models.checkpoint import list_checkpoints
from rlvr.trainers import wall_clock
from rlvr.trainers.rl import train_rl
from rlvr.trainers.wall_clock import WallClockMarks, process_age_s
from rlvr.verifiers.base import Verdict


def parity_judge(tasks, completions):
    return [Verdict(float(len(c) % 2 == 0), len(c) % 2 == 0, "pass" if len(c) % 2 == 0 else "wrong")
            for c in completions]


def test_process_age_is_this_process_and_advances():
    a = process_age_s()
    time.sleep(0.05)
    b = process_age_s()
    assert 0.0 < a < b and b - a >= 0.03  # /proc/uptime counts in hundredths
    # the process started before this module was imported, and not days ago
    assert time.perf_counter() - wall_clock._IMPORTED - 0.02 <= process_age_s() < 24 * 3600


def test_marks_fire_once_per_passed_mark_and_skip_the_ones_a_long_step_spans():
    now = [3.0]
    m = WallClockMarks(10, clock=lambda: now[0])
    seen = []
    for t in (5, 9.9, 10.0, 12, 19, 41, 42, 50.5):  # 10 fires at 10.0; 20, 30, 40 spanned by one step: one save at 41
        now[0] = t
        seen.append(m.due())
    assert seen == [None, None, 10.0, None, None, 41, None, 50.5]
    now[0] = 25.0
    assert WallClockMarks(10, clock=lambda: now[0]).next == 30.0  # marks passed before the stage opened are skipped
    with pytest.raises(ValueError):
        WallClockMarks(0)


def test_rl_stage_saves_at_each_mark_and_logs_the_clock(tiny_dir, tmp_path, monkeypatch):
    # a fake clock: 10 s per reading; the stage reads it once at open (10 s) and once per step end (20, 30, ...)
    ticks = iter(range(10, 10_000, 10))
    monkeypatch.setattr(wall_clock, "process_age_s", lambda: float(next(ticks)))
    stage = RLStage(data=BuiltinArithmetic(families=["add2"], n=32), sampling=SamplingConfig(group_size=2, max_new_tokens=4),
                    max_steps=5, tasks_per_step=2, micro_batch_size=4, save_every=0, save_every_s=25, keep_last=0)
    res = train_rl(stage, ModelConfig(path=tiny_dir), tmp_path, seed=0, judge=parity_judge)
    events = [json.loads(x) for x in Path(res.metrics_path).read_text().splitlines()]
    timed = [e for e in events if e.get("event") == "timed_checkpoint"]
    # marks 25, 50: passed at the step-2 end (30 s) and the step-4 end (50 s); step 5 is the last (final/ only)
    assert [(e["step"], e["process_s"]) for e in timed] == [(2, 30.0), (4, 50.0)]
    saved = list_checkpoints(tmp_path / stage.name / "checkpoints")
    assert [p.name for p in saved] == ["step-000002", "step-000004"]
    assert [e["checkpoint"] for e in timed] == [str(p) for p in saved]
    assert (saved[0] / "config.json").exists()  # a model folder: `rlvr eval --model` reads it


def test_save_every_s_off_by_default_and_not_negative():
    assert RLStage().save_every_s == 0
    with pytest.raises(ValueError):
        RLStage(save_every_s=-1)
