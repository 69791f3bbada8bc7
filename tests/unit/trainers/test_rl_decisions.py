"""Decisions of the GRPO-family trainer (issue 10, item 8), each tested:

- the sampling temperature must be > 0 (training divides the logits by it: T = 0 gives NaN);
- the mini-batch shuffle is seeded by (seed, step, epoch), never by the batch's length;
- DAPO's defaults: soft overlong punishment on (buffer = a fifth of max_new_tokens, as DAPO's 4096 of
  20480), and dynamic sampling keeps the groups whose *correctness* is mixed (0 < #correct < G).
"""

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from rlvr.config.data import BuiltinArithmetic
from rlvr.config.load import load_recipe
from rlvr.config.rl import DAPOLoss, RewardTerm, RLStage, SamplingConfig
from rlvr.config.rlhf import PPOStage
from rlvr.errors import ConfigError
from rlvr.models.load import load_pretrained
from rlvr.models.logprobs import token_logprobs
from rlvr.rollout.engine import Generation
from rlvr.trainers import rl
from rlvr.trainers.rl import TaskStream, policy_update, rollout_step
from rlvr.data.collate import TokenBatch
from rlvr.verifiers.base import Verdict


def test_temperature_must_be_positive(tiny_dir, tmp_path):
    for bad in (0.0, -1.0):
        with pytest.raises(ValidationError, match="temperature"):
            SamplingConfig(temperature=bad)
        with pytest.raises(ValidationError, match="temperature"):
            PPOStage(sampling={"group_size": 1, "temperature": bad})
    recipe = tmp_path / "r.yaml"
    recipe.write_text("stages:\n  - type: rl\n    sampling: {temperature: 0}\n")
    with pytest.raises(ConfigError, match=r"stages\.0\.rl\.sampling\.temperature|temperature"):
        load_recipe(recipe)
    model, _ = load_pretrained(tiny_dir)
    ids = torch.tensor([[2, 20, 21]])
    with pytest.raises(ValueError, match="temperature must be > 0"):
        token_logprobs(model, ids, torch.ones_like(ids), temperature=0.0)


def mini_batch_orders(monkeypatch, seed: int, step: int, n: int = 8) -> list[list[float]]:
    """The rows (by advantage) each mini-batch of a 2-epoch × 2-mini-batch update gets."""
    seen = []

    def spy(model, mb, *a, **k):
        seen.append(mb.advantages[:, 0].tolist())  # each row's advantage (spread over its tokens)
        return {"train/loss": 0.0}

    monkeypatch.setattr(rl, "update_minibatch", spy)
    monkeypatch.setattr(rl, "optimizer_step", lambda *a, **k: 0.0)
    monkeypatch.setattr(rl, "recompute_old_logprobs", lambda *a, **k: {})
    monkeypatch.setattr(rl, "first_update_micros", lambda *a, **k: [])
    batch = TokenBatch.from_rows([[1, 2]] * n, [[0, 1]] * n, old_logprobs=[[0.0, -1.0]] * n,
                                 advantages=[float(i + 1) for i in range(n)])
    st = RLStage(ppo_epochs=2, mini_batches=2)
    sched = type("S", (), {"step": lambda self: None})()
    policy_update(None, None, sched, st, batch, False, seed=seed, step=step)
    return seen


def test_minibatch_shuffle_is_seeded_by_seed_step_and_epoch(monkeypatch):
    a = mini_batch_orders(monkeypatch, seed=0, step=3)
    assert a == mini_batch_orders(monkeypatch, seed=0, step=3)           # reproducible (resume)
    assert a != mini_batch_orders(monkeypatch, seed=0, step=4)           # a new order every step
    assert a != mini_batch_orders(monkeypatch, seed=1, step=3)           # and every seed
    assert a[:2] != a[2:]                                                # and every epoch
    assert sorted(x for mb in a[:2] for x in mb) == [float(i + 1) for i in range(8)]  # each row once an epoch
    perm = np.random.default_rng([0, 3, 0]).permutation(8).tolist()
    assert a[0] == [float(i + 1) for i in perm[:4]]


class ScriptedEngine:
    """Returns fixed completions (one list of token lists per prompt, G each), regardless of the prompt."""

    def __init__(self, completions):
        self.completions = completions

    def generate(self, prompts, params):
        comps = [c for _, c in zip(prompts, self.completions) for c in c]
        n = len(comps)
        return Generation([prompts[i // params.n] for i in range(n)], comps, [[-1.0] * len(c) for c in comps],
                          ["length" if len(c) == params.max_new_tokens else "eos" for c in comps],
                          ["x" * len(c) for c in comps], [i // params.n for i in range(n)])


def dapo_stage(dynamic_sampling=None, max_resample_rounds=4, **kw):
    return RLStage(**{"data": BuiltinArithmetic(families=["add2"], n=8), "tasks_per_step": 2,
                      "sampling": SamplingConfig(group_size=2, max_new_tokens=10, dynamic_sampling=dynamic_sampling,
                                                 max_resample_rounds=max_resample_rounds), **kw})


def test_dapo_default_punishes_overlong_completions(tiny_dir):
    """Default buffer 10 // 5 = 2: a completion of 9 tokens gets -0.5, one of 10 (cut) gets -1."""
    _, tok = load_pretrained(tiny_dir)
    st = dapo_stage(loss=DAPOLoss(), dynamic_sampling="off")
    eng = ScriptedEngine([[[5] * 4, [5] * 9], [[5] * 10, [5] * 3]])
    passed = lambda tasks, comps: [Verdict(1.0, True, "pass") for _ in comps]
    ro, _ = rollout_step(st, eng, tok, TaskStream(rl.load_task_source(st.data), 0), passed, 0, 0, [])
    assert ro.rewards.tolist() == [[1.0, 0.5], [0.0, 1.0]]


def test_dapo_dynamic_sampling_keeps_groups_with_mixed_correctness(tiny_dir):
    """Group 0: both correct, lengths differ (the length term makes the composed reward vary): not
    informative about correctness, dropped. Group 1: one correct, one wrong: kept."""
    _, tok = load_pretrained(tiny_dir)
    st = dapo_stage(loss=DAPOLoss(), max_resample_rounds=0,
                    rewards=[RewardTerm(name="correct"), RewardTerm(name="length", weight=0.1),
                             RewardTerm(name="overlong", weight=0.0)])
    eng = ScriptedEngine([[[5] * 2, [5] * 4], [[5] * 3, [5] * 3]])
    judge = lambda tasks, comps: [Verdict(1.0, True, "pass"), Verdict(1.0, True, "pass"),
                                  Verdict(1.0, True, "pass"), Verdict(0.0, False, "wrong")]
    ro, _ = rollout_step(st, eng, tok, TaskStream(rl.load_task_source(st.data), 0), judge, 0, 0, [])
    assert ro.num_groups == 1 and ro.passed.tolist() == [[True, False]]


def test_dapo_parts_are_options_of_every_variant(tiny_dir):
    """Dynamic sampling, the overlong term and overlong filtering are not DAPO's own: a GRPO stage turns them
    on with one line each, and a DAPO stage turns its defaults off the same way."""
    from rlvr.config.rl import GRPOLoss

    grpo = dapo_stage(loss=GRPOLoss(mask_truncated=True), dynamic_sampling="correct",
                      rewards=[RewardTerm(name="correct"), RewardTerm(name="overlong", buffer=2)])
    assert grpo.sampling.dynamic_sampling == "correct" and grpo.loss.mask_truncated
    plain = dapo_stage(loss=GRPOLoss())
    assert plain.sampling.dynamic_sampling == "off" and [t.name for t in plain.rewards] == ["correct"]
    dapo = dapo_stage(loss=DAPOLoss())  # the paper's recipe: explicit in the resolved config
    assert dapo.sampling.dynamic_sampling == "correct" and [t.name for t in dapo.rewards] == ["correct", "overlong"]
    off = dapo_stage(loss=DAPOLoss(), dynamic_sampling="off",
                     rewards=[RewardTerm(name="correct"), RewardTerm(name="overlong", weight=0.0)])
    assert off.sampling.dynamic_sampling == "off" and off.rewards[-1].weight == 0.0
    # GRPO with the overlong term: the same hand-worked rewards as DAPO's default (buffer 2 of 10)
    _, tok = load_pretrained(tiny_dir)
    eng = ScriptedEngine([[[5] * 4, [5] * 9], [[5] * 10, [5] * 3]])
    passed = lambda tasks, comps: [Verdict(1.0, True, "pass") for _ in comps]  # noqa: E731
    st = dapo_stage(loss=GRPOLoss(), rewards=[RewardTerm(name="correct"), RewardTerm(name="overlong")])
    ro, _ = rollout_step(st, eng, tok, TaskStream(rl.load_task_source(st.data), 0), passed, 0, 0, [])
    assert ro.rewards.tolist() == [[1.0, 0.5], [0.0, 1.0]]


def test_moved_dapo_keys_name_their_new_place(tmp_path):
    """A recipe written for the old DAPO fields gets an error that says where they live now."""
    from rlvr.config.load import load_recipe
    from rlvr.errors import ConfigError

    p = tmp_path / "r.yaml"
    p.write_text("stages:\n  - type: rl\n    loss: {type: dapo, dynamic_sampling: correct}\n")
    with pytest.raises(ConfigError, match=r"sampling\.dynamic_sampling"):
        load_recipe(p)
