"""Held-out scoring with reward terms: the verdict's reward is the weighted sum the RL stage computes, and
a pass is a summed reward of at least 1 (partial credit is not a pass); infra stays infra."""

import sys
import types

import pytest

from rlvr.config.rl import RewardTerm
from rlvr.data.arithmetic import generate
from rlvr.monitoring.scoring import PASS_REWARD, describe_scoring, eval_judge


@pytest.fixture()
def rewards_module(monkeypatch):
    mod = types.ModuleType("scoring_rewards_t")
    mod.partial = lambda task, completion: 1.0 if task.gold["answer"] in completion else 0.05
    mod.half = lambda task, completion: 0.5
    mod.broken = lambda task, completion: 1 / 0
    monkeypatch.setitem(sys.modules, "scoring_rewards_t", mod)
    return mod


def test_partial_credit_is_not_a_pass_and_a_reward_of_one_is(rewards_module):
    task = generate(["add2"], 1, seed=0)[0]
    judge = eval_judge([RewardTerm(name="python", function="scoring_rewards_t:partial")])
    right, wrong = judge([task, task], [f"\\boxed{{{task.gold['answer']}}}", "no idea"], lengths=[6, 7])
    assert (right.reward, right.passed, right.outcome) == (PASS_REWARD, True, "pass")
    assert (wrong.reward, wrong.passed, wrong.outcome) == (pytest.approx(0.05), False, "wrong")


def test_terms_are_summed_with_their_weights_and_lengths(rewards_module):
    """correct (1 for the right answer) x 1 + half (0.5) x 1 + length (-6/12) x 1 = 1.0: a pass;
    the same with a completion of 12 tokens: 1 + 0.5 - 1 = 0.5, not a pass."""
    task = generate(["add2"], 1, seed=0)[0]
    terms = [RewardTerm(name="correct"), RewardTerm(name="python", function="scoring_rewards_t:half"),
             RewardTerm(name="length")]
    judge = eval_judge(terms, max_new_tokens=12)
    ans = f"\\boxed{{{task.gold['answer']}}}"
    short, long_ = judge([task, task], [ans, ans], lengths=[6, 12])
    assert short.reward == pytest.approx(1.0) and short.passed
    assert long_.reward == pytest.approx(0.5) and not long_.passed and long_.outcome == "wrong"
    assert "a pass is a summed reward >= 1" in describe_scoring(terms)


def test_a_failing_reward_stays_infra(rewards_module):
    task = generate(["add2"], 1, seed=0)[0]
    (v,) = eval_judge([RewardTerm(name="python", function="scoring_rewards_t:broken")])([task], ["x"], lengths=[1])
    assert v.outcome == "infra" and not v.passed
