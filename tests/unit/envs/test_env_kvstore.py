"""The key-value store env: key rules, tools, goal predicate, generator."""

import json

import pytest

from rlvr.data.types import Task
from rlvr.envs import KVStoreEnv, generate_kvstore_tasks
from rlvr.envs.kvstore import canon
from rlvr.envs.tools import ToolCall
from rlvr.errors import DataError


def call(name, **args):
    return ToolCall(name, args).render()


def kv_env(store, protected=("audit:",), goal=None, budget=20):
    gold = {"env": "kvstore", "budget": budget, "init": {"store": store, "protected": list(protected)},
            "goal": goal or {"keys": {"x": 1}}}
    env = KVStoreEnv()
    env.reset(Task(id="k", prompt="p", kind="env", gold=gold))
    return env


def test_tools_get_set_delete_keys():
    env = kv_env({"stock:apple": 130, "note": "hi", "audit:mon": "ok"})
    out = env.step(call("get", key="stock:apple") + call("get", key="note") + call("keys", prefix="stock")
                   + call("keys", prefix="zzz")).observation
    assert out == ('<tool_output>130</tool_output><tool_output>"hi"</tool_output>'
                   "<tool_output>stock:apple</tool_output><tool_output>(no keys)</tool_output>")
    env.step(call("set", key="stock:apple", value=172) + call("delete", key="note")
             + call("set", key="n", value="v"))
    assert env.end_state() == {"store": {"audit:mon": "ok", "n": "v", "stock:apple": 172}}


@pytest.mark.parametrize("action, message", [
    (call("get", key="nope"), "error: no such key: nope"),
    (call("delete", key="nope"), "error: no such key: nope"),
    (call("set", key="Bad Key", value=1), "error: invalid key"),
    (call("set", key="k", value="x" * 300), "longer than 256"),
])
def test_ordinary_errors(action, message):
    env = kv_env({"a": 1})
    r = env.step(action)
    assert message in r.observation and not env.violations


@pytest.mark.parametrize("action, kind", [
    (call("set", key="__done__", value=1), "reserved"),
    (call("set", key="_goal", value="true"), "reserved"),
    (call("get", key="__gold__"), "reserved"),
    (call("keys", prefix="__"), "reserved"),
    (call("set", key="audit:mon", value="edited"), "protected"),
    (call("delete", key="audit:mon"), "protected"),
])
def test_reserved_and_protected_keys_are_violations(action, kind):
    env = kv_env({"audit:mon": "ok"})
    r = env.step(action)
    assert r.done and env.violations[0].kind == kind and env.end_state()["store"] == {"audit:mon": "ok"}


def test_store_key_cap():
    env = kv_env({f"k{i}": i for i in range(256)}, budget=5)
    assert "the store is full" in env.step(call("set", key="new", value=1)).observation


def test_goal_predicate_compares_as_text():
    goal = {"keys": {"a": 172, "b": None, "c": "x"}}
    assert canon(172) == canon(" 172 ") == "172"
    assert KVStoreEnv.check_goal({"store": {"a": "172", "c": "x"}}, goal).met
    res = KVStoreEnv.check_goal({"store": {"a": 171, "b": 0}}, goal)
    assert res.failures == ("a: value differs", "b: should not exist", "c: missing")


def test_bad_gold_is_a_data_error():
    with pytest.raises(DataError, match="bad initial entry"):
        kv_env({"a": True})
    with pytest.raises(DataError, match="protected"):
        kv_env({"a": 1}, protected=[""])


def test_generator_is_deterministic_and_its_solutions_pass():
    a, b = generate_kvstore_tasks(8, seed=5), generate_kvstore_tasks(8, seed=5)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    assert [t.gold for t in a] != [t.gold for t in generate_kvstore_tasks(8, seed=6)]
    assert {t.family for t in a} == {"kvstore/deliveries", "kvstore/transfer"}
    for t in a:
        env = KVStoreEnv()
        obs = [env.reset(t).text]
        for turn in json.loads(t.solution):
            obs.append(env.step(turn).observation)
        assert env.goal_result().met and not env.violations and not env.leaks, t.id
        secrets = KVStoreEnv.secret_values(t.gold)
        assert secrets and all(len(s) >= 3 and s not in obs[0] for s in secrets)
        # the oracle never reads a secret before writing it
        assert env.tool_calls <= env.budget
