"""The stage lifecycle shared by every trainer: after kill + resume, metrics.jsonl holds every step exactly
once and each row equals the uninterrupted run's (timings aside); the health monitor's history travels in
the checkpoint, so a resumed run raises the same alerts as the uninterrupted one."""

import json

import pytest
import torch

from rlvr.config.data import BuiltinArithmetic
from rlvr.config.health import HealthConfig
from rlvr.config.model import ModelConfig
from rlvr.config.optim import OptimConfig
from rlvr.config.rl import RLStage, SamplingConfig
from rlvr.config.sft import SFTStage
from rlvr.trainers.rl import train_rl
from rlvr.trainers.sft import train_sft
from rlvr.verifiers.base import Verdict

TIMING = ("time/", "perf/")


def parity_judge(tasks, completions):
    return [Verdict(float(len(c) % 2 == 0), len(c) % 2 == 0, "pass" if len(c) % 2 == 0 else "wrong")
            for c in completions]


def step_rows(path):
    """{step: [rows]} of the per-step rows (event rows aside), timing keys dropped."""
    out: dict[int, list[dict]] = {}
    for line in open(path):
        r = json.loads(line)
        if "event" in r:
            continue
        out.setdefault(r["step"], []).append({k: v for k, v in r.items() if k != "time" and not k.startswith(TIMING)})
    return out


def sft_stage():
    return SFTStage(data=BuiltinArithmetic(families=["add2"], n=64), optim=OptimConfig(lr=3e-3, warmup_steps=2),
                    max_steps=6, batch_size=8, micro_batch_size=8, save_every=2, keep_last=1, log_every=1)


def rl_stage(health=None):
    return RLStage(data=BuiltinArithmetic(families=["add2"], n=32),
                   sampling=SamplingConfig(group_size=4, max_new_tokens=8), max_steps=5, tasks_per_step=4,
                   micro_batch_size=8, save_every=2, keep_last=1, health=health or HealthConfig())


@pytest.mark.parametrize("kind", ["sft", "rl"])
def test_resumed_metrics_hold_every_step_once_equal_to_the_uninterrupted_run(kind, tiny_dir, tmp_path):
    train, stage, kw = ((train_sft, sft_stage(), {}) if kind == "sft"
                        else (train_rl, rl_stage(), {"judge": parity_judge}))
    cfg = ModelConfig(path=tiny_dir)
    a = train(stage, cfg, tmp_path / "a", seed=3, **kw)
    with pytest.raises(KeyboardInterrupt):
        train(stage, cfg, tmp_path / "b", seed=3, crash_at_step=3, **kw)   # dies after the step-2 checkpoint
    b = train(stage, cfg, tmp_path / "b", seed=3, resume=True, **kw)
    ra, rb = step_rows(a.metrics_path), step_rows(b.metrics_path)
    assert sorted(rb) == sorted(ra) == list(range(1, stage.max_steps + 1))
    dup = {s: len(v) for s, v in rb.items() if len(v) != 1}
    assert not dup, f"steps logged more than once after resume: {dup}"
    for s in ra:
        assert ra[s][0].keys() == rb[s][0].keys(), s
        for k, v in ra[s][0].items():
            assert rb[s][0][k] == pytest.approx(v, abs=1e-6), (s, k)


def test_health_history_survives_resume(tiny_dir, tmp_path):
    # dead_frac 0 on a run that cannot show progress (stall_delta 1.1: the pass rate cannot rise that much):
    # the dead_groups alert needs more than stall_steps (2) steps of history, so it fires from step 3 on in
    # the uninterrupted run — and in the resumed one only if the history came back from the step-2 checkpoint.
    st = rl_stage(HealthConfig(window=2, stall_steps=2, stall_delta=1.1, dead_frac=0.0))
    cfg = ModelConfig(path=tiny_dir)
    a = train_rl(st, cfg, tmp_path / "a", seed=1, judge=parity_judge)
    with pytest.raises(KeyboardInterrupt):
        train_rl(st, cfg, tmp_path / "b", seed=1, judge=parity_judge, crash_at_step=3)
    b = train_rl(st, cfg, tmp_path / "b", seed=1, judge=parity_judge, resume=True)
    ra, rb = step_rows(a.metrics_path), step_rows(b.metrics_path)
    fired_a = [s for s in sorted(ra) if ra[s][0].get("health/dead_groups")]
    fired_b = [s for s in sorted(rb) if rb[s][-1].get("health/dead_groups")]
    assert fired_a == [3, 4, 5]
    assert fired_b == fired_a
    state = torch.load(tmp_path / "b" / "rl" / "checkpoints" / "step-000004" / "trainer_state.pt",
                       weights_only=False)["state"]
    assert len(state["health"]["history"]) == 4


def test_every_rank_takes_rank_zeros_health_knobs(tiny_dir, tmp_path):
    """Each rank's monitor sees its own rollouts; the knobs its actions move (β, entropy coefficient,
    temperature, G) must be rank 0's on every process, or the ranks train different losses. A stand-in
    process group hands back "rank 0's" knobs (a moved temperature) at every step: the stage samples at it
    from the next step on and checkpoints it (before, only the stop decision was shared)."""
    from rlvr.trainers.parallel import DistContext

    class RankZeroMovedTheTemperature(DistContext):
        def agree(self, obj):
            stop, knobs = obj
            return stop, {**knobs, "temperature": 1.7}

    st = rl_stage()
    import rlvr.trainers.sources as rl_mod

    temps = []
    orig = rl_mod.rollout_step

    def spy(stage, *a, **kw):
        temps.append(stage.sampling.temperature)
        return orig(stage, *a, **kw)

    rl_mod.rollout_step = spy
    try:
        train_rl(st, ModelConfig(path=tiny_dir), tmp_path / "r", seed=1, judge=parity_judge,
                 dist=RankZeroMovedTheTemperature())
    finally:
        rl_mod.rollout_step = orig
    assert temps == [1.0] + [1.7] * (st.max_steps - 1)
    state = torch.load(tmp_path / "r" / "rl" / "checkpoints" / "step-000004" / "trainer_state.pt",
                       weights_only=False)["state"]
    assert state["health"]["knobs"]["temperature"] == 1.7
