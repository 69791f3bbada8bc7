"""The model-judged reward (RLAIF): scores, batching and cache, failures as infra, the probe, and the
gate that refuses an unprobed judge in an RL stage."""

import json

import pytest
import torch

from rlvr.commands.preflight import check_judges, preflight
from rlvr.commands.probe_judge import ATTACKS, probe_judge, wrong_version
from rlvr.config.recipe import Recipe
from rlvr.config.rl import RewardTerm
from rlvr.data.types import Task
from rlvr.errors import ConfigError
from rlvr.models.judge import ModelJudge, checkpoint_hash, probe_report_path, rubric_hash
from rlvr.rollout.collector import compose_rewards
from rlvr.rollout.model_judge import with_model_judges
from rlvr.verifiers.base import Verdict

RUBRIC = "Score 9 if the answer is right, 0 if wrong."


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory):
    from rlvr.models.tiny import build_tiny

    d = tmp_path_factory.mktemp("judge") / "model"
    build_tiny(d, size="test", seed=3)
    return str(d)


def test_scores_are_batched_cached_and_in_range(judge_dir):
    j = ModelJudge(judge_dir, RUBRIC, batch_size=2, min_mass=0.0)
    prompts, comps = ["1+1=?", "2+2=?", "3+3=?"], ["2", "5", "6"]
    s = j.score(prompts, comps)
    assert all(0.0 <= x <= 1.0 for x in s) and j.calls == 2  # 3 texts in batches of 2
    one = ModelJudge(judge_dir, RUBRIC, batch_size=1, min_mass=0.0).score(prompts[1:2], comps[1:2])
    assert one[0] == pytest.approx(s[1], abs=1e-5)  # left padding does not change a row's score
    assert j.score(prompts, comps) == s and j.calls == 2  # cached
    # an untrained judge puts ~10% of its mass on the digits: below min_mass there is no score
    assert ModelJudge(judge_dir, RUBRIC, min_mass=0.9).score(prompts[:1], comps[:1]) == [None]


class FakeScorer:
    def __init__(self, table):
        self.table = table

    def score(self, prompts, completions):
        return [self.table.get(c) for c in completions]


def test_wrapper_puts_scores_in_the_reward_and_failures_are_infra():
    term = RewardTerm(name="judge", judge_model="j", rubric=RUBRIC)
    base = lambda tasks, comps: [Verdict(0.0, False, "wrong") if c != "boom" else Verdict.infra("x")  # noqa: E731
                                 for c in comps]
    judged = with_model_judges(base, [RewardTerm(), term], judges={"judge": FakeScorer({"a": 0.75, "b": None})})
    tasks = [Task(id=str(i), prompt="p") for i in range(3)]
    v = judged(tasks, ["a", "b", "boom"])
    assert v[0].details["rewards"]["judge"] == 0.75 and v[0].outcome == "wrong"
    assert v[1].outcome == "infra" and "no score" in v[1].details["error"]
    assert v[2].outcome == "infra"
    terms = compose_rewards(v, [1, 1, 1], [RewardTerm(), term], 8)
    assert terms["judge"].tolist() == [0.75, 0.0, 0.0]
    assert with_model_judges(base, [RewardTerm()]) is base  # no judge term: untouched


def test_judge_term_config_errors():
    with pytest.raises(ValueError, match="judge_model"):
        RewardTerm(name="judge", rubric=RUBRIC)
    with pytest.raises(ValueError, match="only for name: judge"):
        RewardTerm(name="correct", rubric=RUBRIC)


def test_probe_reports_each_attack_keyed_by_hashes(judge_dir):
    assert wrong_version("3*4 = 12 so \\boxed{12}") == "3*4 = 12 so \\boxed{13}"
    rep = probe_judge(ModelJudge(judge_dir, RUBRIC, min_mass=0.0), ["add2"], 4, threshold=0.05)
    assert [a["attack"] for a in rep["attacks"]] == list(ATTACKS)
    assert rep["judge_hash"] == checkpoint_hash(judge_dir) and rep["rubric_hash"] == rubric_hash(RUBRIC)
    assert all(a["effect"] is not None for a in rep["attacks"])
    assert rep["passed"] == (rep["discriminates"] and not any(a["moves_score"] for a in rep["attacks"]))


def _recipe(judge_dir):
    return Recipe(stages=[{"type": "rl", "rewards": [{"name": "correct"}, {"name": "judge", "judge_model": judge_dir,
                                                                          "rubric": RUBRIC, "weight": 0.5}]}])


def test_gate_refuses_unprobed_and_failed_judges(judge_dir):
    r = _recipe(judge_dir)
    report = probe_report_path(judge_dir, RUBRIC)
    report.unlink(missing_ok=True)
    with pytest.raises(ConfigError, match="no probe report"):
        preflight(r)
    warnings = preflight(r, allow_unprobed_judge=True)
    assert any("RLAIF" in w for w in warnings) and any("unprobed" in w for w in warnings)
    good = {"judge_hash": checkpoint_hash(judge_dir), "rubric_hash": rubric_hash(RUBRIC), "passed": True}
    report.write_text(json.dumps({**good, "passed": False, "attacks": [{"attack": "flattery", "moves_score": True}]}))
    with pytest.raises(ConfigError, match="flattery"):
        preflight(r)
    report.write_text(json.dumps({**good, "rubric_hash": rubric_hash("another rubric")}))
    with pytest.raises(ConfigError, match="another checkpoint or rubric"):
        preflight(r)
    report.write_text(json.dumps(good))
    assert any("RLAIF" in w for w in preflight(r))  # probed and passing: allowed, still labelled
    assert check_judges(0, Recipe(stages=[{"type": "rl"}]).stages[0], False) == []
    report.unlink()
