"""Faults the stage lifecycle survives: a corrupt or half-written checkpoint is refused naming the file and
offering the previous one; a full disk while saving leaves the previous checkpoint intact; a non-finite loss
or gradient skips the update (RL, preference, PPO), K in a row stop the stage keeping the last good
checkpoint, and no NaN reaches a checkpoint; SIGINT at a step boundary writes a checkpoint; the resumed
reward-model and multi-turn agent stages equal the uninterrupted ones (the other stages: their own files)."""

import errno
import json
import os
import signal

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config.agent import AgentLoopConfig, RolloutConfig
from rlvr.config.data import BuiltinArithmetic, BuiltinEnvTasks
from rlvr.config.model import ModelConfig
from rlvr.config.optim import OptimConfig
from rlvr.config.preference import PairsFile, PreferenceStage
from rlvr.config.rl import RLStage, SamplingConfig
from rlvr.config.rlhf import PPOStage, RewardModelStage
from rlvr.data.preference import PreferencePair, write_pairs_jsonl
from rlvr.errors import Interrupted
from rlvr.models.checkpoint import (CheckpointError, list_checkpoints, save_training_checkpoint,
                                    verify_checkpoint)
from rlvr.models.tiny import build_tiny
from rlvr.trainers import ppo as ppo_mod
from rlvr.trainers import preference as pref_mod
from rlvr.trainers import micro_loss as micro_loss_mod
from rlvr.trainers import rl as rl_mod
from rlvr.trainers.common import build_optimizer, find_checkpoint
from rlvr.trainers.guards import NonFiniteError
from rlvr.trainers.ppo import train_ppo
from rlvr.trainers.preference import train_preference
from rlvr.trainers.reward_model import train_reward_model
from rlvr.trainers.rl import train_rl
from rlvr.trainers.sft import train_sft
from rlvr.config.sft import SFTStage
from rlvr.verifiers.base import Verdict


def parity_judge(tasks, completions):
    return [Verdict(float(len(c) % 2 == 0), len(c) % 2 == 0, "pass" if len(c) % 2 == 0 else "wrong")
            for c in completions]


def weights(path):
    return load_file(os.path.join(path, "model.safetensors"))


def events(metrics_path, name):
    return [r for r in map(json.loads, open(metrics_path)) if r.get("event") == name]


# ----------------------------------------------------------------------------------------- checkpoints

@pytest.fixture()
def two_checkpoints(tmp_path):
    model, tok = build_tiny(size="test", seed=0)
    opt, sched = build_optimizer(model, OptimConfig(), 10)
    root = tmp_path / "st" / "checkpoints"
    for step in (2, 4):
        save_training_checkpoint(root, step, model, tok, opt, sched, {"cursor": step}, keep_last=5)
    return root, model, tok, opt, sched


def test_manifest_lists_every_file_with_its_sha256(two_checkpoints):
    root, *_ = two_checkpoints
    ck = list_checkpoints(root)[-1]
    files = json.loads((ck / "manifest.json").read_text())["files"]
    assert {"model.safetensors", "trainer_state.pt", "config.json"} <= set(files)
    assert all(len(v["sha256"]) == 64 and v["bytes"] > 0 for v in files.values())
    verify_checkpoint(ck)


@pytest.mark.parametrize("damage", ["flip", "truncate", "no-manifest"])
def test_a_corrupt_latest_checkpoint_is_refused_naming_the_file_and_offering_the_previous(two_checkpoints, damage):
    root, *_ = two_checkpoints
    latest = root / "step-000004"
    f = latest / "model.safetensors"
    data = bytearray(f.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
        f.write_bytes(bytes(data))
    elif damage == "truncate":  # a half-written file
        f.write_bytes(bytes(data[: len(data) // 3]))
    else:
        f = latest / "manifest.json"
        f.unlink()
    with pytest.raises(CheckpointError) as e:
        find_checkpoint(root.parent, resume=True)
    msg = str(e.value)
    assert f"refusing to resume from {latest}" in msg and str(f) in msg
    assert f"the previous checkpoint {root / 'step-000002'} is intact" in msg
    os.rename(latest, root / ".bad-step-000004")  # what the message tells the user to do
    assert find_checkpoint(root.parent, resume=True) == root / "step-000002"


def test_disk_full_while_saving_leaves_the_previous_checkpoint_intact(two_checkpoints, monkeypatch):
    root, model, tok, opt, sched = two_checkpoints
    before = {p.name: p.read_bytes() for p in (root / "step-000004").iterdir()}
    real_save = torch.save

    def full_disk(obj, f, *a, **kw):  # writes half the state, then the disk is full
        real_save(obj, f, *a, **kw)
        with open(f, "r+b") as fh:
            fh.truncate(os.path.getsize(f) // 2)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    with pytest.raises(CheckpointError, match=r"step-000006: not written, the disk is full .*"
                                              r"previous checkpoint .*step-000004 is intact"):
        save_training_checkpoint(root, 6, model, tok, opt, sched, {}, keep_last=1)
    assert [p.name for p in root.iterdir()] and sorted(p.name for p in root.iterdir()) == ["step-000002",
                                                                                             "step-000004"]
    assert {p.name: p.read_bytes() for p in (root / "step-000004").iterdir()} == before  # not pruned, not touched
    verify_checkpoint(root / "step-000004")


def test_nan_weights_never_reach_a_checkpoint(two_checkpoints):
    root, model, tok, opt, sched = two_checkpoints
    with torch.no_grad():
        next(model.parameters())[0].fill_(float("nan"))
    with pytest.raises(CheckpointError, match="holds NaN/inf"):
        save_training_checkpoint(root, 6, model, tok, opt, sched, {}, keep_last=1)
    assert sorted(p.name for p in root.iterdir()) == ["step-000002", "step-000004"]


# -------------------------------------------------------------------------------------------- numerics

def rl_stage(**kw):
    return RLStage(data=BuiltinArithmetic(families=["add2"], n=32), optim=OptimConfig(lr=1e-2, warmup_steps=0,
                   max_nonfinite_steps=2), sampling=SamplingConfig(group_size=4, max_new_tokens=6), max_steps=4,
                   tasks_per_step=2, micro_batch_size=8, save_every=0, **kw)


def poison_loss(monkeypatch, module, name, steps, loss_module=None):
    """Make ``module.name``'s loss (``loss_module.name`` where given) NaN on the given (0-based) steps, counted
    by the stage's (``module``'s) log_step calls."""
    count = {"step": 0}
    loss_module = loss_module or module
    real_loss, real_log = getattr(loss_module, name), module.log_step

    def loss(*a, **kw):
        out = real_loss(*a, **kw)
        if count["step"] in steps:
            return (out[0] * float("nan"), *out[1:])
        return out

    def log(run, *a, **kw):
        count["step"] += 1
        return real_log(run, *a, **kw)
    monkeypatch.setattr(loss_module, name, loss)
    monkeypatch.setattr(module, "log_step", log)


def poison_grads(monkeypatch, module, loader, steps, pick=lambda r: r[0]):
    """A NaN gradient on the first parameter of the model ``module.loader`` returns, on the given steps."""
    count = {"step": 0}
    real_load, real_log = getattr(module, loader), module.log_step

    def load(*a, **kw):
        out = real_load(*a, **kw)
        p = next(q for q in pick(out).parameters() if q.requires_grad)
        p.register_hook(lambda g: g * float("nan") if count["step"] in steps else g)
        return out

    def log(run, *a, **kw):
        count["step"] += 1
        return real_log(run, *a, **kw)
    monkeypatch.setattr(module, loader, load)
    monkeypatch.setattr(module, "log_step", log)


def test_rl_one_nan_step_is_skipped_and_logged_with_its_task_ids(tiny_dir, tmp_path, monkeypatch):
    poison_loss(monkeypatch, rl_mod, "micro_loss", {1}, micro_loss_mod)
    res = train_rl(rl_stage(), ModelConfig(path=tiny_dir), tmp_path, seed=0, judge=parity_judge)
    ev = events(res.metrics_path, "nonfinite")
    assert [e["step"] for e in ev] == [2] and len(ev[0]["task_ids"]) == 2 and ev[0]["task_ids"][0].startswith("add2")
    assert res.steps == 4
    assert all(torch.isfinite(v).all() for v in weights(res.checkpoint).values())


def test_rl_k_nan_steps_in_a_row_stop_keeping_the_last_good_weights(tiny_dir, tmp_path, monkeypatch):
    poison_loss(monkeypatch, rl_mod, "micro_loss", {0, 1, 2, 3}, micro_loss_mod)
    with pytest.raises(NonFiniteError) as e:
        train_rl(rl_stage(), ModelConfig(path=tiny_dir), tmp_path, seed=0, judge=parity_judge)
    msg = str(e.value)
    assert "2 steps in a row (1..2)" in msg and "task ids of the last: add2" in msg
    ck = tmp_path / "rl" / "checkpoints" / "step-000002"
    assert f"the last good checkpoint is {ck}" in msg
    assert not (tmp_path / "rl" / "final").exists()
    start, kept = load_file(os.path.join(tiny_dir, "model.safetensors")), weights(ck)
    for k, v in kept.items():  # no update was applied: the kept weights are the starting ones, finite
        assert torch.isfinite(v).all() and torch.equal(v, start[k]), k


@pytest.fixture(scope="module")
def pair_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("pairs") / "p.jsonl"
    write_pairs_jsonl(p, [PreferencePair(f"{i}+1=?", f"ok {i % 5}7", f"ok {i % 5}2", id=f"pair-{i}") for i in range(8)])
    return str(p)


def test_preference_nan_gradient_skips_and_k_in_a_row_stop(tiny_dir, tmp_path, monkeypatch, pair_file):
    poison_grads(monkeypatch, pref_mod, "load_policy", {0, 1, 2}, pick=lambda r: r[1])
    st = PreferenceStage(pairs=PairsFile(path=pair_file), batch_size=4, micro_batch_size=4, max_steps=4,
                         optim=OptimConfig(lr=1e-2, warmup_steps=0, max_nonfinite_steps=3), save_every=0)
    with pytest.raises(NonFiniteError, match=r"3 steps in a row \(1..3\)"):
        train_preference(st, ModelConfig(path=tiny_dir), tmp_path, seed=0, init_path=tiny_dir)
    ev = events(tmp_path / st.name / "metrics.jsonl", "nonfinite")
    assert [e["step"] for e in ev] == [1, 2, 3] and ev[0]["task_ids"]
    start = load_file(os.path.join(tiny_dir, "model.safetensors"))
    kept = weights(tmp_path / st.name / "checkpoints" / "step-000003")
    assert all(torch.equal(v, start[k]) for k, v in kept.items())


def test_ppo_nan_gradient_skips_the_update_and_the_run_goes_on(tiny_dir, tmp_path, monkeypatch):
    poison_grads(monkeypatch, ppo_mod, "setup_models", {0}, pick=lambda r: r[0])
    st = PPOStage(data=BuiltinArithmetic(families=["add2"], n=16), sampling=SamplingConfig(group_size=1, max_new_tokens=6),
                  max_steps=2, tasks_per_step=2, mini_batches=1, optim=OptimConfig(lr=1e-2, warmup_steps=0))
    res = train_ppo(st, ModelConfig(path=tiny_dir), tmp_path, seed=0, judge=parity_judge)
    rows = [r for r in map(json.loads, open(res.metrics_path)) if "event" not in r]
    assert rows[0]["train/nonfinite_skipped"] >= 1 and rows[1]["train/nonfinite_skipped"] == 0
    ev = events(res.metrics_path, "nonfinite")
    assert [e["step"] for e in ev] == [1] and ev[0]["task_ids"][0].startswith("add2")
    assert all(torch.isfinite(v).all() for v in weights(res.checkpoint).values())


# ------------------------------------------------------------------------------------------------ signals

def test_sigint_writes_a_checkpoint_at_the_step_boundary_and_resume_finishes(tiny_dir, tmp_path, monkeypatch):
    from rlvr.trainers import sft as sft_mod

    real_log = sft_mod.log_step

    def log(run, *a, **kw):
        if run.step == 2:  # a Ctrl-C arrives during step 3
            os.kill(os.getpid(), signal.SIGINT)
        return real_log(run, *a, **kw)
    monkeypatch.setattr(sft_mod, "log_step", log)
    st = SFTStage(data=BuiltinArithmetic(families=["add2"], n=32), max_steps=6, batch_size=4, micro_batch_size=4,
                  save_every=0)
    before = signal.getsignal(signal.SIGINT)  # default_int_handler, or SIG_IGN under a shell's `cmd &`
    with pytest.raises(Interrupted) as e:
        train_sft(st, ModelConfig(path=tiny_dir), tmp_path, seed=0)
    assert e.value.step == 3 and e.value.checkpoint == str(tmp_path / "sft" / "checkpoints" / "step-000003")
    assert signal.getsignal(signal.SIGINT) is before  # handlers restored
    monkeypatch.setattr(sft_mod, "log_step", real_log)
    res = train_sft(st, ModelConfig(path=tiny_dir), tmp_path, seed=0, resume=True)
    assert res.steps == 6 and events(res.metrics_path, "interrupted")[0]["step"] == 3


# ------------------------------------------------------------------------ resume: RM and multi-turn agent

def test_reward_model_resume_equals_uninterrupted(tiny_dir, tmp_path, pair_file):
    st = RewardModelStage(pairs=PairsFile(path=pair_file), batch_size=4, micro_batch_size=4, max_steps=5,
                          save_every=2, optim=OptimConfig(lr=3e-3, warmup_steps=1))
    cfg = ModelConfig(path=tiny_dir)
    a = train_reward_model(st, cfg, tmp_path / "a", seed=0, init_path=tiny_dir)
    with pytest.raises(KeyboardInterrupt):
        train_reward_model(st, cfg, tmp_path / "b", seed=0, init_path=tiny_dir, crash_at_step=3)
    b = train_reward_model(st, cfg, tmp_path / "b", seed=0, init_path=tiny_dir, resume=True)
    wa, wb = weights(a.checkpoint), weights(b.checkpoint)
    assert any(not torch.equal(wa[k], load_file(os.path.join(tiny_dir, "model.safetensors")).get(k, wa[k]))
               for k in wa)
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-6, rtol=0), k


def test_multi_turn_agent_resume_equals_uninterrupted(tmp_path):
    st = RLStage(data=BuiltinEnvTasks(env="calculator", n=16, split="train", seed=1),
                 rollout=RolloutConfig(mode="multi_turn",
                                       loop=AgentLoopConfig(max_turns=2, max_new_tokens=8, max_total_tokens=512)),
                 sampling=SamplingConfig(group_size=3, temperature=1.5), optim=OptimConfig(lr=1e-2, warmup_steps=0),
                 max_steps=4, tasks_per_step=2, micro_batch_size=8, save_every=2)
    cfg = ModelConfig(tiny={"size": "test", "seed": 0})
    a = train_rl(st, cfg, tmp_path / "a", seed=0)
    with pytest.raises(KeyboardInterrupt):
        train_rl(st, cfg, tmp_path / "b", seed=0, crash_at_step=3)
    b = train_rl(st, cfg, tmp_path / "b", seed=0, resume=True)
    wa, wb = weights(a.checkpoint), weights(b.checkpoint)
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-6, rtol=0), k
    ra = [r for r in map(json.loads, open(a.metrics_path)) if "agent/turns_mean" in r]
    rb = [r for r in map(json.loads, open(b.metrics_path)) if "agent/turns_mean" in r]
    assert [r["step"] for r in ra] == [1, 2, 3, 4] and [r["step"] for r in rb][-2:] == [3, 4]
    assert [r["reward/mean"] for r in ra][2:] == [r["reward/mean"] for r in rb][-2:]


# ------------------------------------------------------------------------------------- verifier faults

def flaky_judge(frac_infra):
    """The first ``frac_infra`` of each batch's verdicts are infra (raised, hung, garbage), the rest parity."""
    def judge(tasks, completions):
        out = parity_judge(tasks, completions)
        k = int(round(frac_infra * len(out)))
        return [Verdict.infra("verifier raised: boom") for _ in range(k)] + out[k:]
    return judge


def test_infra_below_the_threshold_is_counted_and_the_run_goes_on(tiny_dir, tmp_path):
    res = train_rl(rl_stage(), ModelConfig(path=tiny_dir), tmp_path, seed=0, judge=flaky_judge(0.25))
    rows = [r for r in map(json.loads, open(res.metrics_path)) if "verifier/infra" in r]
    assert res.steps == 4 and all(r["verifier/infra"] == 2 for r in rows)  # 2 of 8 each step, out of the advantages


def test_an_infra_storm_pauses_the_run_with_a_clear_message(tiny_dir, tmp_path):
    st = rl_stage().model_copy(update={"save_every": 1, "max_infra_frac": 0.5})
    st.health.code_tests.twin_every = 0  # one judge call a step: no regenerated-twin verification in between
    calls = {"n": 0}

    def judge(tasks, completions):  # fine for two steps, then 6 of 8 verifications fail
        calls["n"] += 1
        return (parity_judge if calls["n"] <= 2 else flaky_judge(0.75))(tasks, completions)
    from rlvr.trainers.guards import VerifierStormError

    with pytest.raises(VerifierStormError) as e:
        train_rl(st, ModelConfig(path=tiny_dir), tmp_path, seed=0, judge=judge)
    msg = str(e.value)
    assert "step 3: 6 of 8 verifications were infra (75% > max_infra_frac 0.5" in msg
    assert f"The last checkpoint is {tmp_path / 'rl' / 'checkpoints' / 'step-000002'}" in msg and "--resume" in msg
    assert events(tmp_path / "rl" / "metrics.jsonl", "paused_infra")[0]["infra"] == 6
    # the first failure is named, and every failed verification is on file with its completion
    errors = tmp_path / "rl" / "reward_errors.jsonl"
    assert "The first failure (task " in msg and "): verifier raised: boom." in msg and f"are in {errors}" in msg
    assert "samples.jsonl" not in msg
    rows = [json.loads(x) for x in errors.read_text().splitlines()]
    assert len(rows) == 6 and {r["step"] for r in rows} == {3} and all(r["error"] == "verifier raised: boom" for r in rows)
    assert all(isinstance(r["completion"], str) and r["completion_ids"] for r in rows)


def test_a_prompt_filling_the_token_budget_ends_its_trajectory_instead_of_crashing(tmp_path):
    # before the fix: max_new_tokens <= 0 reached the engine, which raised on an empty generation
    st = RLStage(data=BuiltinEnvTasks(env="calculator", n=8, split="train", seed=1),
                 rollout=RolloutConfig(mode="multi_turn",
                                       loop=AgentLoopConfig(max_turns=2, max_new_tokens=8, max_total_tokens=64)),
                 sampling=SamplingConfig(group_size=2), max_steps=1, tasks_per_step=2, save_every=0)
    res = train_rl(st, ModelConfig(tiny={"size": "test", "seed": 0}), tmp_path, seed=0)
    row = [r for r in map(json.loads, open(res.metrics_path)) if r.get("step") == 1][0]
    assert res.steps == 1 and row["train/sequences"] == 0
