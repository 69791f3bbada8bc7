"""Registry, task routing and the composite reward."""

import pickle

import pytest

from rlvr.data.types import Task
from rlvr.errors import ConfigError
from rlvr.verifiers.base import Verdict
from rlvr.verifiers.math import MathVerifier
from rlvr.verifiers.registry import (
    CompositeReward,
    RewardTerm,
    TaskRouter,
    available_kinds,
    completion_chars,
    format_reward,
    get_verifier,
    verifier_for_task,
)
from rlvr.verifiers.sql import SqlVerifier

MATH = Task(id="m", kind="math", gold={"answer": "4"})


def test_get_verifier_by_kind_with_options():
    v = get_verifier("math", timeout_s=2.0)
    assert isinstance(v, MathVerifier) and v.timeout_s == 2.0
    assert isinstance(get_verifier("sql"), SqlVerifier)
    assert {"math", "sql", "code", "env"} <= set(available_kinds())
    with pytest.raises(ConfigError, match="unknown verifier"):
        get_verifier("chess")
    with pytest.raises(ConfigError, match="bad options"):
        get_verifier("math", colour="red")


def test_verifier_for_task_is_shared_per_kind():
    assert verifier_for_task(MATH) is verifier_for_task(Task(id="x", kind="math"))


def test_router_dispatches_and_survives_pickling():
    router = TaskRouter({"math": {"timeout_s": 2.0}})
    sql = Task(id="s", kind="sql", gold={"schema_sql": "CREATE TABLE t(x);", "gold_sql": "SELECT 1"})
    assert router.verify(MATH, r"\boxed{4}").passed
    assert router.verify(sql, "SELECT 1").passed
    clone = pickle.loads(pickle.dumps(router))
    assert clone.options == {"math": {"timeout_s": 2.0}} and clone.verify(MATH, r"\boxed{5}").outcome == "wrong"


def test_router_unknown_kind_is_infra():
    v = TaskRouter().verify(Task(id="x", kind="chess"), "e4")
    assert v.outcome == "infra" and "unknown verifier" in v.details["error"]


def bonus(task, completion):
    return 0.5 if "please" in completion else 0.0


def broken(task, completion):
    raise RuntimeError("metric bug")


def test_composite_weighted_sum_and_log_only_terms():
    # reward = 1.0 * 1 (math pass) + 0.2 * 0.5 (bonus) = 1.1; the length term (weight 0) is only logged
    c = CompositeReward([("math", MathVerifier(), 1.0), ("bonus", bonus, 0.2), ("chars", completion_chars, 0.0)])
    v = c.verify(MATH, r"please \boxed{4}")
    assert v.reward == pytest.approx(1.1) and v.passed and v.outcome == "pass"
    assert v.details["metrics"] == {"reward/math": 1.0, "reward/bonus": 0.5, "reward/chars": 16.0}
    w = c.verify(MATH, r"\boxed{5}")
    assert w.reward == 0.0 and w.outcome == "wrong" and not w.passed


def test_composite_failing_terms():
    logged = CompositeReward([RewardTerm("math", "math"), RewardTerm("broken", broken, 0.0)])
    v = logged.verify(MATH, r"\boxed{4}")
    assert v.outcome == "pass" and v.details["metrics"]["reward/broken"] is None  # weight 0: logged only
    weighted = CompositeReward([RewardTerm("math", "math"), RewardTerm("broken", broken, 0.5)])
    v = weighted.verify(MATH, r"\boxed{4}")
    assert v.outcome == "infra" and v.reward == 0.0 and "metric bug" in v.details["error"]


def test_composite_validation_and_primary():
    with pytest.raises(ConfigError, match="non-zero weight"):
        CompositeReward([("chars", completion_chars, 0.0)])
    with pytest.raises(ConfigError, match="unique"):
        CompositeReward([("a", bonus, 1.0), ("a", bonus, 1.0)])
    c = CompositeReward([("bonus", bonus, 1.0), ("math", "math", 1.0)], primary="math")
    assert c.verify(MATH, r"\boxed{4}").outcome == "pass"
    assert isinstance(pickle.loads(pickle.dumps(c)), CompositeReward)


def test_format_reward():
    assert format_reward(MATH, r"\boxed{4}") == 1.0
    assert format_reward(MATH, "4") == 0.0
    assert format_reward(MATH, r"\boxed{3} or \boxed{4}") == 0.0
    sql = Task(id="s", kind="sql", answer_format="code_fence")
    assert format_reward(sql, "```sql\nSELECT 1\n```") == 1.0 and format_reward(sql, "SELECT 1") == 0.0


def test_verdict_from_float_term():
    v = CompositeReward([("bonus", bonus, 2.0)]).verify(MATH, "please")
    assert isinstance(v, Verdict) and v.reward == 1.0
