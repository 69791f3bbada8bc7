"""The rollout collector: reward composition and DAPO's overlong shaping against hand-worked numbers,
infra verdicts kept out of the advantages, group selection and concatenation."""

import pytest
import torch

from rlvr.config.rl import RewardTerm, SamplingConfig
from rlvr.data.types import Task
from rlvr.models.tiny import build_tiny
from rlvr.rollout.collector import Rollouts, collect, compose_rewards, overlong_penalty
from rlvr.rollout.engine import Generation
from rlvr.verifiers.base import Verdict


def test_overlong_penalty_by_hand():
    # L_max = 10, buffer L_b = 4: free up to 6 tokens, then linear to -penalty at 10, capped beyond.
    # L=5 -> 0; L=6 -> 0; L=8 -> (6-8)/4 * 0.5 = -0.25; L=10 -> -0.5; L=12 -> -0.5 (capped)
    got = overlong_penalty(torch.tensor([5, 6, 8, 10, 12]), max_new_tokens=10, buffer=4, penalty=0.5)
    assert got.tolist() == pytest.approx([0.0, 0.0, -0.25, -0.5, -0.5])
    assert overlong_penalty(torch.tensor([10]), 10, buffer=0, penalty=1.0).tolist() == [0.0]  # off


def test_compose_rewards_by_hand():
    verdicts = [Verdict(1.0, True, "pass"), Verdict(0.0, False, "format"), Verdict(0.0, False, "wrong")]
    terms = [RewardTerm(name="correct"), RewardTerm(name="format", weight=0.5), RewardTerm(name="length", weight=0.1)]
    out = compose_rewards(verdicts, [8, 16, 4], terms, max_new_tokens=16)
    assert out["correct"].tolist() == [1.0, 0.0, 0.0]
    assert out["format"].tolist() == [1.0, 0.0, 1.0]           # 0 only where no answer could be extracted
    assert out["length"].tolist() == pytest.approx([-0.5, -1.0, -0.25])  # -len / max_new_tokens


class FixedEngine:
    """Returns fixed completions (ids and texts) for every prompt, G per prompt."""

    def __init__(self, completions):
        self.completions = completions

    def generate(self, prompts, params):
        n = params.n
        rows = [(i, self.completions[(i * n + j) % len(self.completions)]) for i in range(len(prompts)) for j in range(n)]
        return Generation([prompts[i] for i, _ in rows], [c[0] for _, c in rows], [[-1.0] * len(c[0]) for _, c in rows],
                          ["eos"] * len(rows), [c[1] for _, c in rows], [i for i, _ in rows])

    def sync_weights(self, model):
        pass


def test_collect_composes_weighted_rewards_and_keeps_infra_out():
    _, tok = build_tiny(size="test")
    tasks = [Task(id=f"t{i}", prompt="1+1=?", gold={"answer": "2"}) for i in range(2)]
    engine = FixedEngine([([5, 6, 7, 8], "a"), ([5, 6], "b"), ([5], "c"), ([5, 6, 7], "d")])
    outcomes = {"a": Verdict(1.0, True, "pass"), "b": Verdict(0.0, False, "wrong"),
                "c": Verdict(0.0, False, "infra"), "d": Verdict(0.0, False, "format")}

    def judge(ts, texts):
        return [outcomes[x] for x in texts]

    sampling = SamplingConfig(group_size=4, max_new_tokens=4)
    terms = [RewardTerm(name="correct"), RewardTerm(name="format", weight=0.5), RewardTerm(name="overlong", buffer=2)]
    ro = collect(engine, tok, tasks, judge, sampling, terms, seed=0)
    # reward = correct + 0.5 * format + overlong(L_max 4, buffer 2: free to 2 tokens, -1 at 4)
    #   a: 1 + 0.5 - 1.0 = 0.5     b: 0 + 0.5 + 0 = 0.5     c: 0 + 0.5 + 0 = 0.5     d: 0 + 0 - 0.5 = -0.5
    assert ro.rewards.tolist() == [pytest.approx([0.5, 0.5, 0.5, -0.5])] * 2
    assert ro.valid.tolist() == [[True, True, False, True]] * 2   # infra: out of the advantages
    assert ro.passed.tolist() == [[True, False, False, False]] * 2
    sub = ro.select_groups([1])
    assert sub.num_groups == 1 and sub.completion_ids == ro.completion_ids[4:]
    both = Rollouts.concat([sub, ro.select_groups([0])])
    assert both.num_groups == 2 and both.rewards.shape == (2, 4) and both.texts == ro.texts[4:] + ro.texts[:4]
