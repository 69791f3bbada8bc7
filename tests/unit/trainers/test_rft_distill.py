"""RFT (expert iteration) and off-policy distillation: the filter by hand, the loop end to end on the
tiny model, exact resume mid-round, the teacher's samples are what is kept, bad input."""

import json

import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load_file

from rlvr.config.data import BuiltinArithmetic
from rlvr.config.model import ModelConfig
from rlvr.config.optim import OptimConfig
from rlvr.config.recipe import Recipe
from rlvr.config.rft import DistillStage, RejectionSampling, RFTStage
from rlvr.data.chat import encode_prompt, stop_token_ids
from rlvr.data.order import TaskStream
from rlvr.data.sources import load_task_source
from rlvr.errors import ConfigError
from rlvr.models.load import load_pretrained
from rlvr.models.tiny import build_tiny
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.hf_engine import HFEngine
from rlvr.rollout.rejection import select_verified
from rlvr.trainers.distill import train_distill
from rlvr.trainers.rft import train_rft
from rlvr.verifiers.base import Verdict


def test_select_verified_by_hand():
    # task 0: rows 0-3; task 1: rows 4-7
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    texts = ["a b", " a b ", "abc", "zz", "x", "yyyy", "yy", "q"]
    lengths = [3, 5, 3, 2, 1, 4, 2, 1]
    passed = [True, True, True, False, False, True, True, True]
    finished = [True, True, True, True, True, True, True, False]
    # all: dedupe "a b" == " a b " (first kept), row 3 failed; task 1: row 4 failed, row 7 truncated
    assert select_verified(groups, texts, lengths, passed, finished) == [0, 2, 5, 6]
    # shortest: task 0 rows 0 and 2 tie at 3 tokens -> the first; task 1: row 6 (2 tokens) beats row 5 (4)
    assert select_verified(groups, texts, lengths, passed, finished, keep="shortest") == [0, 6]
    # cap 1 == shortest; cap 2 keeps both of each task, in row order
    assert select_verified(groups, texts, lengths, passed, finished, max_per_task=2) == [0, 2, 5, 6]
    assert select_verified(groups, texts, lengths, [False] * 8, finished) == []


def even_judge(tasks, completions):
    """A deterministic stand-in verifier: a completion passes when its length is even."""
    return [Verdict(float(len(c) % 2 == 0), len(c) % 2 == 0, "pass" if len(c) % 2 == 0 else "wrong")
            for c in completions]


def stage(cls=RFTStage, **kw):
    base = dict(data=BuiltinArithmetic(families=["add2"], n=64),
                sampling=RejectionSampling(group_size=4, max_new_tokens=12),
                optim=OptimConfig(lr=3e-3, warmup_steps=1, schedule="constant"), rounds=2, tasks_per_round=6,
                steps_per_round=3, batch_size=4, micro_batch_size=4, save_every=2, log_every=1)
    base.update(kw)
    return cls(**base)


def rows(path):
    return [json.loads(x) for x in open(path)]


def test_rft_runs_rounds_and_trains(tiny_dir, tmp_path):
    res = train_rft(stage(), ModelConfig(path=tiny_dir), tmp_path / "r", seed=0, judge=even_judge)
    recs = [r for r in rows(res.metrics_path) if "train/loss" in r or "train/skipped" in r]
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 6]
    sampled = [r for r in recs if "sample/kept" in r]
    assert [r["step"] for r in sampled] == [1, 4]  # one sampling per round, at its first step
    assert all(r["sample/kept"] > 0 for r in sampled)
    assert all(r["sample/kept"] <= r["sample/distinct_passed"] for r in sampled)
    before = load_file(f"{tiny_dir}/model.safetensors")
    after = load_file(f"{res.checkpoint}/model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_rft_nothing_verified_moves_nothing(tiny_dir, tmp_path):
    reject = lambda tasks, comps: [Verdict(0.0, False, "wrong") for _ in comps]  # noqa: E731
    res = train_rft(stage(rounds=1, save_every=0), ModelConfig(path=tiny_dir), tmp_path / "r", judge=reject)
    assert all(r.get("train/skipped") == 1 for r in rows(res.metrics_path) if "step" in r and r["step"] > 0
               and "event" not in r)
    before = load_file(f"{tiny_dir}/model.safetensors")
    after = load_file(f"{res.checkpoint}/model.safetensors")
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_rft_resume_mid_round_equals_uninterrupted(tiny_dir, tmp_path):
    cfg = ModelConfig(path=tiny_dir)
    full = train_rft(stage(), cfg, tmp_path / "a", seed=3, judge=even_judge)
    with pytest.raises(KeyboardInterrupt):  # dies at step 5, after the step-4 checkpoint (round 1, step 1 of 3)
        train_rft(stage(), cfg, tmp_path / "b", seed=3, judge=even_judge, crash_at_step=5)
    resumed = train_rft(stage(), cfg, tmp_path / "b", seed=3, judge=even_judge, resume=True)
    wa, wb = load_file(f"{full.checkpoint}/model.safetensors"), load_file(f"{resumed.checkpoint}/model.safetensors")
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-6, rtol=0), k


def test_distill_keeps_the_teachers_samples(tiny_dir, tmp_path):
    teacher = tmp_path / "teacher"
    build_tiny(teacher, size="test", seed=7)  # same tokenizer, other weights
    st = stage(DistillStage, teacher=str(teacher), rounds=1, steps_per_round=2, save_every=1,
               sampling=RejectionSampling(group_size=1, temperature=0.0, max_new_tokens=12))
    pass_all = lambda tasks, comps: [Verdict(1.0, True, "pass") for _ in comps]  # noqa: E731
    with pytest.raises(KeyboardInterrupt):
        train_distill(st, ModelConfig(path=tiny_dir), tmp_path / "r", seed=0, judge=pass_all, crash_at_step=1)
    state = torch.load(next((tmp_path / "r" / "distill" / "checkpoints").iterdir()) / "trainer_state.pt",
                       weights_only=False)
    kept = state["state"]["examples"]
    # the teacher's greedy completions of the same tasks, the ones that end on their own
    t_model, tok = load_pretrained(teacher)
    tasks = TaskStream(load_task_source(st.data), 0).take(st.tasks_per_round)
    gen = HFEngine(t_model, tok).generate([encode_prompt(tok, t) for t in tasks], SamplingParams(
        n=1, temperature=0.0, max_new_tokens=12, stop_token_ids=stop_token_ids(tok), seed=0))
    want = [p + c for p, c, r in zip(gen.prompt_ids, gen.completion_ids, gen.finish_reason) if r != "length"]
    want = list(dict.fromkeys(map(tuple, want)))  # greedy: one per task (dedupe keeps the first)
    assert [tuple(ids) for ids, _ in kept] == want


def test_distill_refuses_a_teacher_with_another_tokenizer(tiny_dir, tmp_path):
    from transformers import AutoTokenizer

    teacher = tmp_path / "teacher"
    build_tiny(teacher, size="test", seed=1)
    tok = AutoTokenizer.from_pretrained(teacher)
    tok.add_tokens(["<extra>"])
    tok.save_pretrained(teacher)
    st = stage(DistillStage, teacher=str(teacher), rounds=1, save_every=0)
    with pytest.raises(ConfigError, match="different tokenizer"):
        train_distill(st, ModelConfig(path=tiny_dir), tmp_path / "r", judge=even_judge)


def test_environment_tasks_are_refused(tiny_dir, tmp_path):
    from rlvr.config.data import BuiltinEnvTasks

    st = stage(data=BuiltinEnvTasks(env="calculator", n=4), rounds=1, save_every=0)
    with pytest.raises(ConfigError, match="environment"):
        train_rft(st, ModelConfig(path=tiny_dir), tmp_path / "r", judge=even_judge)


def test_recipe_stage_types_and_errors():
    r = Recipe(stages=[{"type": "rft", "rounds": 2}, {"type": "distill", "teacher": "t/final"}])
    assert [s.type for s in r.stages] == ["rft", "distill"]
    assert r.stages[0].max_steps == 2 * r.stages[0].steps_per_round
    with pytest.raises(ValidationError, match="teacher"):
        Recipe(stages=[{"type": "distill"}])
    with pytest.raises(ValidationError, match="keep"):
        Recipe(stages=[{"type": "rft", "keep": "longest"}])
