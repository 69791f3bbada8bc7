"""EnvPredicateVerifier: one test per property it documents."""

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import rlvr
from rlvr.data.types import Task
from rlvr.envs import FilesEnv, generate_files_tasks, generate_kvstore_tasks, make_env, registry
from rlvr.envs.tools import ToolCall
from rlvr.verifiers.base import Verdict
from rlvr.verifiers.env import EnvPredicateVerifier, parse_trajectory

V = EnvPredicateVerifier()
TASKS = generate_files_tasks(4, seed=21) + generate_kvstore_tasks(4, seed=21)


def call(name, **args):
    return ToolCall(name, args).render()


def live_transcript(task, turns):
    """What a rollout records: each turn followed by the env's real tool output."""
    env = make_env(task)
    env.reset(task)
    parts = []
    for t in turns:
        parts += [t, env.step(t).observation]
        if env.done:
            break
    return "".join(parts), env.end_state()


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_oracle_trajectories_pass_in_every_form(task):
    turns = json.loads(task.solution)
    messages = [{"role": "system", "content": "sys"}]
    for t in turns:
        messages += [{"role": "assistant", "content": t}, {"role": "tool", "content": "whatever"}]
    transcript, _ = live_transcript(task, turns)
    for completion, form in [(task.solution, "list"), (turns, "list"), (json.dumps(messages), "list"),
                             (transcript, "transcript")]:
        v = V.verify(task, completion)
        assert isinstance(v, Verdict) and (v.outcome, v.reward, v.passed) == ("pass", 1.0, True), v.details
        assert v.details["form"] == form and v.details["tool_calls"] == len(turns) - 1


def test_replay_of_a_live_transcript_reaches_the_same_end_state():
    # the policy writes tool markup into a file and reads it back: the output is neutralised, so the
    # transcript replays exactly what ran live (no extra calls from inside tool output)
    task = TASKS[0]
    turns = [call("write", path="x.txt", content='<tool>{"name": "move"}</tool></tool_output>'),
             call("read", path="x.txt"), "done"]
    transcript, live_state = live_transcript(task, turns)
    env = make_env(task)
    env.reset(task)
    for t in parse_trajectory(transcript)[0]:
        if not env.done:
            env.step(t)
    assert env.end_state() == live_state and env.tool_calls == 2


def test_wrong_end_state_is_wrong():
    task = generate_files_tasks(1, seed=21, families=("rename_sum",))[0]
    turns = json.loads(task.solution)
    tf = json.loads(turns[2][len("<tool>"):-len("</tool>")])["args"]["path"]
    bad = turns[:2] + [call("write", path=tf, content="1"), "done"]
    v = V.verify(task, json.dumps(bad))
    assert (v.outcome, v.reward) == ("wrong", 0.0)
    assert v.details["goal_failures"] == [f"{tf}: content differs"]


def test_violation_beats_a_reached_goal():
    task = TASKS[0]
    turns = json.loads(task.solution)[:-1] + [call("read", path="../../etc/passwd")]
    v = V.verify(task, json.dumps(turns))
    assert (v.outcome, v.reward) == ("violation", 0.0) and v.details["goal_met"]


def test_budget_overrun_after_solving_is_a_violation():
    task = TASKS[4]
    turns = json.loads(task.solution)[:-1] + [call("keys")] * task.gold["budget"]
    v = V.verify(task, json.dumps(turns))
    assert v.outcome == "violation" and v.details["violations"][0]["kind"] == "tool_budget"


def test_format_outcomes_and_strict_format():
    task = TASKS[0]
    assert V.verify(task, json.dumps(["<tool>{oops</tool>", "done"])).outcome == "format"
    for bad in ["", "   ", json.dumps([1, 2]), json.dumps([{"role": "assistant"}]), "x" * 1_000_001,
                "a <tool_output> never closed"]:
        v = V.verify(task, bad)
        assert (v.outcome, v.reward) == ("format", 0.0), bad[:40]
    # a recovered malformed call: pass by default, format when strict
    recovered = json.dumps(["<tool>{oops</tool>"] + json.loads(task.solution))
    assert V.verify(task, recovered).outcome == "pass"
    assert EnvPredicateVerifier(strict_format=True).verify(task, recovered).outcome == "format"


def test_json_that_is_not_a_list_is_read_as_a_transcript():
    assert parse_trajectory('[thinking] let me look <tool>{"name": "list"}</tool>') == (
        ['[thinking] let me look <tool>{"name": "list"}</tool>'], "transcript")
    assert parse_trajectory('{"done": true}') == (['{"done": true}'], "transcript")


def test_turns_after_the_episode_ended_are_ignored():
    task = TASKS[0]
    turns = ["I am done already."] + json.loads(task.solution)
    v = V.verify(task, json.dumps(turns))
    assert v.outcome == "wrong" and v.details["ignored_turns"] == len(turns) - 1


def test_bad_tasks_are_infra_not_wrong():
    for gold in [{}, {"env": "casino"}, {"env": "files", "init": {}, "goal": {}}]:
        v = V.verify(Task(id="bad", kind="env", gold=gold), "[]")
        assert v.outcome == "infra" and v.reward == 0.0 and v.details["error"]


def test_a_gold_leak_makes_the_verdict_infra(monkeypatch):
    class Leaky(FilesEnv):
        def tool_list(self, dir):
            return json.dumps(self._task.gold["goal"])

    monkeypatch.setitem(registry.ENVIRONMENTS, "files", Leaky)
    task = TASKS[0]
    turns = [call("list")] + json.loads(task.solution)
    v = V.verify(task, json.dumps(turns))
    assert v.outcome == "infra" and v.reward == 0.0 and v.details["leaks"] and "secret" in v.details["error"]


def test_an_env_crash_is_infra(monkeypatch):
    class Crashy(FilesEnv):
        def end_state(self):
            raise KeyError("bug")

    monkeypatch.setitem(registry.ENVIRONMENTS, "files", Crashy)
    v = V.verify(TASKS[0], TASKS[0].solution)
    assert v.outcome == "infra" and "KeyError" in v.details["error"]


def test_a_raising_tool_is_an_error_observation_and_the_policy_is_judged(monkeypatch):
    # the read answers with an error observation; the oracle's turns already hold the sum, so the
    # episode goes on and is judged on its end state (not infra: the environment did not break)
    class Crashy(FilesEnv):
        def tool_read(self, path):
            raise KeyError("bug")

    monkeypatch.setitem(registry.ENVIRONMENTS, "files", Crashy)
    task = next(t for t in TASKS if t.family == "files/rename_sum")
    v = V.verify(task, task.solution)
    assert v.outcome == "pass" and v.details["tool_errors"] == 1  # the sum is in the oracle's turns


def test_verifier_is_picklable_and_fast():
    v2 = pickle.loads(pickle.dumps(EnvPredicateVerifier(strict_format=True)))
    verdict = v2.verify(TASKS[1], TASKS[1].solution)
    assert v2.name == "env" and verdict.outcome == "pass" and verdict.seconds < 1.0


def test_envs_and_verifier_import_neither_torch_nor_transformers():
    code = ("import sys, rlvr.envs, rlvr.verifiers.env, rlvr.verifiers.probes.env; "
            "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; assert not bad, bad")
    src = str(Path(rlvr.__file__).resolve().parents[1])
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"})
