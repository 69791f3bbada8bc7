"""The reset/step protocol and the rules every ToolEnv enforces (budget, caps, violations, leaks)."""

import json

import pytest

from rlvr.data.types import Task
from rlvr.envs import (
    EnvError,
    Environment,
    EnvLimits,
    FilesEnv,
    GoldLeakError,
    KVStoreEnv,
    LeakGuard,
    Observation,
    StepResult,
)
from rlvr.envs.tools import ToolCall
from rlvr.errors import DataError


def call(name, **args):
    return ToolCall(name, args).render()


def files_task(budget=5, **goal_files):
    gold = {"env": "files", "budget": budget,
            "init": {"files": {"a.txt": "17\n25", "r.txt": "hello"}, "readonly": ["a.txt"]},
            "goal": {"files": goal_files or {"total.txt": "42"}}}
    return Task(id="t1", prompt="Write the sum of a.txt into total.txt.", kind="env", gold=gold)


class LeakyFilesEnv(FilesEnv):
    """A deliberately buggy env whose 'list' shows the goal: the guard must catch it."""

    def tool_list(self, dir):
        return json.dumps(self._task.gold["goal"])


def test_envs_satisfy_the_protocol_and_reset_returns_typed_observation():
    env = FilesEnv()
    assert isinstance(env, Environment) and isinstance(KVStoreEnv(), Environment)
    obs = env.reset(files_task())
    assert isinstance(obs, Observation) and obs.budget == 5
    assert obs.text.startswith("Write the sum of a.txt into total.txt.")
    assert "<tool>" in obs.text and "read(path: str)" in obs.text
    assert "42" not in obs.text  # the goal value is never shown


def test_step_before_reset_and_after_done_raise():
    env = FilesEnv()
    with pytest.raises(EnvError, match="before reset"):
        env.step("hi")
    env.reset(files_task())
    r = env.step("I am done.")
    assert isinstance(r, StepResult) and r.done and r.info["final"] and r.observation == ""
    with pytest.raises(EnvError, match="after done"):
        env.step(call("list"))


def test_successful_episode_end_state_and_goal():
    env = FilesEnv()
    env.reset(files_task())
    r = env.step(call("read", path="a.txt"))
    assert r.observation == "<tool_output>17\n25</tool_output>" and not r.done
    env.step(call("write", path="total.txt", content="42\n"))
    assert env.goal_result().met and env.tool_calls == 2
    state = env.end_state()
    assert json.loads(json.dumps(state)) == state  # plain data
    assert state["files"]["total.txt"] == "42\n"


def test_budget_refuses_the_call_after_the_last_and_records_a_violation():
    # budget 2: calls 1 and 2 run, call 3 is refused -> tool_budget violation, episode over
    env = FilesEnv()
    env.reset(files_task(budget=2))
    env.step(call("list") + call("list"))
    r = env.step(call("write", path="total.txt", content="42"))
    assert r.done and "refused" in r.observation and r.info["violation"]["kind"] == "tool_budget"
    assert "total.txt" not in env.end_state()["files"] and env.tool_calls == 2
    assert [v.kind for v in env.violations] == ["tool_budget"]


def test_malformed_calls_count_against_the_budget():
    env = FilesEnv()
    env.reset(files_task(budget=2))
    r = env.step("<tool>{bad</tool><tool>{\"name\": \"nope\"}</tool>")
    assert r.observation.count("format error") == 2 and len(env.format_errors) == 2
    r = env.step(call("list"))
    assert r.done and env.violations[0].kind == "tool_budget"


@pytest.mark.parametrize("action, message", [
    (call("read"), "missing argument 'path'"),
    (call("read", path="a.txt", mode="r"), "unknown argument(s) ['mode']"),
    (call("read", path=3), "must be a string"),
    (call("launch"), "unknown tool 'launch'"),
])
def test_argument_and_tool_name_errors_are_format_errors(action, message):
    env = FilesEnv()
    env.reset(files_task())
    r = env.step(action)
    assert message in r.observation and not r.done and env.format_errors and not env.violations


def test_int_args_reject_bools_and_huge_values():
    env = KVStoreEnv()
    task = Task(id="k", prompt="p", kind="env", gold={"env": "kvstore", "init": {"store": {"a": 1}},
                                                      "goal": {"keys": {"a": 2}}})
    env.reset(task)
    for v in (True, 10**13, 1.5, [1]):
        r = env.step(call("set", key="a", value=v))
        assert "must be a string or an integer" in r.observation
    assert env.end_state()["store"] == {"a": 1}


def test_caps_turn_length_truncation_and_max_turns():
    limits = EnvLimits(max_turn_chars=200, max_output_chars=10, max_turns=3)
    env = FilesEnv(limits)
    env.reset(files_task(budget=50))
    r = env.step(call("list") + " " * 250)
    assert "the limit is 200; nothing was run" in r.observation and env.tool_calls == 0
    r = env.step(call("write", path="big.txt", content="x" * 30) + call("read", path="big.txt"))
    assert r.observation.endswith("xxxxxxxxxx\n...[truncated]</tool_output>")
    r = env.step(call("list"))
    assert r.done and r.info["truncated"] and not env.violations  # truncation is not a violation


def test_end_on_violation_can_be_turned_off_but_budget_always_ends():
    env = FilesEnv(EnvLimits(end_on_violation=False))
    env.reset(files_task())
    r = env.step(call("read", path="../x"))
    assert not r.done and env.violations[0].kind == "path_traversal"


def test_gold_validation_errors_name_the_problem():
    t = files_task()
    with pytest.raises(DataError, match="is 'files', expected 'kvstore'"):
        KVStoreEnv().reset(t)
    t.gold["budget"] = -1
    with pytest.raises(DataError, match="budget"):
        FilesEnv().reset(t)
    t.gold["budget"] = 3
    t.gold["goal"] = {"files": {"../x": "1"}}
    with pytest.raises(DataError, match="bad path"):
        FilesEnv().reset(t)


def test_leak_guard_catches_the_goal_json_even_with_short_values():
    env = LeakyFilesEnv()
    env.reset(files_task())  # goal value "42" is too short to scan for alone; the goal's JSON is not
    r = env.step(call("list"))
    assert r.observation == "<tool_output>[redacted]</tool_output>" and env.leaks[0]["where"] == "turn 1"


def test_leak_guard_on_a_guardable_secret():
    t = files_task(**{"total.txt": "4242"})
    env = LeakyFilesEnv()
    env.reset(t)
    r = env.step(call("list"))
    assert "4242" not in r.observation and "[redacted]" in r.observation
    assert env.leaks == [{"where": "turn 1", "secrets": 2}]  # the value and the goal's JSON
    env = LeakyFilesEnv(EnvLimits(on_leak="record"))
    env.reset(t)
    assert "4242" in env.step(call("list")).observation and env.leaks
    env = LeakyFilesEnv(EnvLimits(on_leak="raise"))
    env.reset(t)
    with pytest.raises(GoldLeakError, match="2 secret goal value"):
        env.step(call("list"))


def test_prompt_holding_the_answer_is_caught_at_reset():
    t = files_task(**{"total.txt": "4242"})
    t.prompt = "Write 4242 into total.txt."
    env = FilesEnv(EnvLimits(on_leak="raise"))
    with pytest.raises(GoldLeakError, match="reset"):
        env.reset(t)


def test_policy_text_read_back_is_not_a_leak_even_through_json_escapes():
    secret = "line one\nline two"
    t = files_task(**{"m.txt": secret})
    env = FilesEnv(EnvLimits(on_leak="raise"))
    env.reset(t)
    env.step(call("write", path="m.txt", content=secret))  # the raw turn holds "line one\\nline two"
    r = env.step(call("read", path="m.txt"))
    assert secret in r.observation and env.leaks == []


def test_leak_guard_ignores_short_secrets():
    g = LeakGuard(["42", " 4242 ", "abc"])
    assert g.secrets == ["abc", "4242"]
    assert g.find("x4242 abc", policy_text="abc") == [1]
