"""The calculator environment, its task generator (hash split, tight budget) and its demonstrations."""

import json

import pytest

from rlvr.config.data import BuiltinEnvTasks
from rlvr.data.sources import load_task_source
from rlvr.envs import CalculatorEnv, generate_calculator_tasks, generate_files_tasks, generate_kvstore_tasks
from rlvr.envs.base import split_of_key, task_key
from rlvr.envs.calculator import compact_call
from rlvr.errors import DataError
from rlvr.verifiers.env import EnvPredicateVerifier


def run(task, turns):
    env = CalculatorEnv()
    env.reset(task)
    outs = [env.step(t) for t in turns]
    return env, outs


def task_of(family="mul_add", seed=0):
    return generate_calculator_tasks(1, seed=seed, families=(family,))[0]


def test_tools_compute_into_registers_and_the_answer_is_a_register_or_the_last_integer():
    t = task_of()  # x*y+z
    x, y, z = (t.gold["init"]["registers"][k] for k in "xyz")
    env, outs = run(t, [compact_call("mul", a="x", b="y"), compact_call("add", a="r1", b=z), "r2"])
    assert outs[0].observation == f"<tool_output>r1 = {x * y}</tool_output>" and not outs[0].done
    assert outs[1].observation == f"<tool_output>r2 = {x * y + z}</tool_output>"
    assert outs[2].done and env.end_state()["answer"] == t.gold["goal"]["answer"] and env.goal_result().met
    env, _ = run(t, [f"the answer is {x * y + z}"])
    assert env.goal_result().met
    env, outs = run(t, [compact_call("mul", a="q", b=2)])
    assert "no register 'q'" in outs[0].observation and env.tool_errors == 1


@pytest.mark.parametrize("final, why", [("no idea", "no answer"), ("12", "answer differs")])
def test_a_missing_or_wrong_answer_fails_the_goal(final, why):
    env, _ = run(task_of(), [final])
    assert env.goal_result().failures == (why,)


def test_the_budget_is_exactly_the_plan_so_a_wasted_call_costs_the_task():
    t = task_of("mul_add_mul")  # three operations, three calls
    assert t.gold["budget"] == 3
    turns = [compact_call("add", a="x", b=1)] * 3 + [compact_call("mul", a="r1", b=2), t.gold["goal"]["answer"]]
    v = EnvPredicateVerifier().verify(t, turns)
    assert v.outcome == "violation" and v.details["violations"][0]["kind"] == "tool_budget"


def test_bad_arguments_are_format_errors_not_crashes():
    env, outs = run(task_of(), ['<tool>{"name":"mul","args":{"a":7.5,"b":2}}</tool>'])
    assert "must be a string or an integer" in outs[0].observation and env.format_errors and env.tool_calls == 1


def test_every_demonstration_passes_including_the_teachers_shortcuts():
    tasks = generate_calculator_tasks(80, seed=3, shortcut_rate=0.5)
    v = EnvPredicateVerifier()
    assert all(v.verify(t, t.solution).outcome == "pass" for t in tasks)
    calls = [sum("<tool>" in x for x in json.loads(t.solution)) for t in tasks]
    # shortcuts (an add/sub done in the head) use fewer calls than the budget on some demonstrations only
    assert any(c < t.gold["budget"] for c, t in zip(calls, tasks))
    assert any(c == t.gold["budget"] for c, t in zip(calls, tasks) if t.family != "calculator/add_mul")
    none = generate_calculator_tasks(40, seed=3, shortcut_rate=0.0)
    assert all(sum("<tool>" in x for x in json.loads(t.solution)) == t.gold["budget"] for t in none)


@pytest.mark.parametrize("gen", [generate_calculator_tasks, generate_files_tasks, generate_kvstore_tasks])
def test_train_and_heldout_are_disjoint_by_a_hash_of_the_task(gen):
    train, held = gen(300, seed=0, split="train"), gen(60, seed=0, split="heldout")
    tk = {task_key(t.gold["env"], t.gold) for t in train}
    hk = [task_key(t.gold["env"], t.gold) for t in held]
    assert not tk & set(hk) and len(set(hk)) == len(hk)  # held-out never repeats a task
    assert {split_of_key(k) for k in tk} == {"train"} and {split_of_key(k) for k in hk} == {"heldout"}
    assert all(t.split == "heldout" for t in held) and gen(5, seed=0, split="train")[0].gold == train[0].gold


def test_generator_and_source_errors_name_the_problem():
    with pytest.raises(DataError, match="unknown families"):
        generate_calculator_tasks(2, families=("div",))
    with pytest.raises(DataError, match="shortcut_rate"):
        generate_calculator_tasks(2, shortcut_rate=2)
    tasks = load_task_source(BuiltinEnvTasks(env="calculator", n=4, families=["add_mul"], split="heldout"))
    assert {t.family for t in tasks} == {"calculator/add_mul"} and len(tasks) == 4


def test_gold_validation_and_the_leak_guard():
    t = task_of()
    bad = type(t).from_dict({**t.to_dict(), "gold": {**t.gold, "goal": {"answer": 12}}})
    with pytest.raises(DataError, match="answer"):
        CalculatorEnv().reset(bad)
    bad = type(t).from_dict({**t.to_dict(), "gold": {**t.gold, "init": {"registers": {"x": "1"}}}})
    with pytest.raises(DataError, match="registers"):
        CalculatorEnv().reset(bad)
    # the answer is not a secret (the tools compute it), but the goal payload is
    assert CalculatorEnv.secret_values(t.gold) == [] and CalculatorEnv.secrets_guardable(t.gold, t.prompt)
