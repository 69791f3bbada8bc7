"""``rlvr validate``'s reward checks: every python reward is imported, its form read from its parameters and
called on a task of its stage; each broken kind gets its own message naming the cause, the stage, the reward
key and (for a failure inside the function) the user's own file:line."""

import itertools
import json
import time
import types

import pytest

from rlvr.config.data import JsonlTasks
from rlvr.config.rl import RewardTerm
from rlvr.verifiers.reward_check import check_python_rewards

REWARDS = '''
import math, time

def good(task, completion):
    return float(task.gold["answer"] in completion)

def trl_good(completions, answer, **kwargs):
    return [float(a in c) for c, a in zip(completions, answer)]

def raises(task, completion):
    raise ValueError("bad reward " + task.id)

def reads_answer(task, completion):
    return float(task.answer in completion)

def returns_str(task, completion):
    return "1.0"

def returns_none(task, completion):
    x = 1.0

def returns_nan(task, completion):
    return math.nan

def returns_bool(task, completion):
    return True

def one_arg(completion):
    return 1.0

def three_args(task, completion, extra):
    return 1.0

def swapped(completion, task):
    return 1.0

def anything(*args, **kwargs):
    return 1.0

def trl_wrong_length(completions, **kwargs):
    return [1.0]

def trl_scalar(completions, **kwargs):
    return 1.0

def trl_strings(completions, **kwargs):
    return ["1"] * len(completions)

def trl_unknown_column(completions, solutions, **kwargs):
    return [1.0] * len(completions)

def trl_raises(completions, **kwargs):
    return [len(c) / 0 for c in completions]

def hangs(task, completion):
    time.sleep(60)

def spins_and_swallows(task, completion):
    while True:
        try:
            time.sleep(0.01)
        except Exception:
            pass

not_callable = 3
'''

_names = itertools.count()


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """A reward module and a stage whose data has one task with a demonstration and one without."""
    mod = f"user_rewards_{next(_names)}"
    (tmp_path / f"{mod}.py").write_text(REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps({"id": "t1", "prompt": "1+2?", "answer": "3", "completion": "It is 3."}) + "\n"
                    + json.dumps({"id": "t2", "prompt": "2+2?", "answer": "4"}) + "\n")

    def check(fn: str, timeout_s: float = 5.0):
        term = RewardTerm(name="python", function=f"{mod}:{fn}", timeout_s=timeout_s)
        stage = types.SimpleNamespace(name="grpo", rewards=[RewardTerm(), term], data=JsonlTasks(path=str(data)))
        return check_python_rewards(0, stage)

    check.mod = mod
    return check


def one(problems):
    assert len(problems) == 1, problems
    key, msg = problems[0]
    assert key == "stages.0.rewards.1.function"
    assert "stage grpo, reward " in msg
    return msg


@pytest.mark.parametrize("fn", ["good", "trl_good"])
def test_working_rewards_of_both_forms_pass(setup, fn):
    assert setup(fn) == []


@pytest.mark.parametrize("fn, says", [
    ("raises", ["ValueError: bad reward t1", ".py:11 in raises", 'raise ValueError("bad reward " + task.id)']),
    ("reads_answer", ["'Task' object has no attribute 'answer'", "did you mean task.gold['answer']",
                      "a Task has: id, prompt, kind, gold", "in reads_answer"]),
    ("returns_str", ["returned str '1.0': expected a finite number"]),
    ("returns_none", ["returned NoneType None: expected a finite number"]),
    ("returns_nan", ["returned nan: expected a finite number"]),
    ("returns_bool", ["returned bool True: expected a finite number"]),
    ("trl_wrong_length", ["returned a list of 1 for 2 completions"]),
    ("trl_scalar", ["returned float 1.0: expected a list of 2 numbers"]),
    ("trl_strings", ["returned str '1': expected a finite number or None as element 0"]),
    ("trl_unknown_column", ["parameter(s) ['solutions'] get no value", "'answer'"]),
    ("trl_raises", ["ZeroDivisionError: division by zero", "in <listcomp>"]),
])
def test_a_reward_that_fails_when_called_is_named_with_its_cause(setup, fn, says):
    msg = one(setup(fn))
    for s in says:
        assert s in msg, (s, msg)


@pytest.mark.parametrize("fn, says", [
    ("one_arg", "(completion) cannot be called as f(task, completion)"),
    ("three_args", "(task, completion, extra) cannot be called as f(task, completion)"),
    ("swapped", "its arguments are swapped"),
    ("anything", "is ambiguous"),
    ("not_callable", "is a int, not callable"),
    ("no_such_fn", "has no 'no_such_fn'; its functions: ["),
])
def test_a_reward_of_the_wrong_signature_or_not_a_function_is_refused(setup, fn, says):
    assert says in one(setup(fn))


def test_an_import_error_in_the_module_names_its_file_and_line(tmp_path, monkeypatch):
    (tmp_path / "broken_rewards.py").write_text("import os\n\nx = undefined_name + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    stage = types.SimpleNamespace(name="grpo", rewards=[RewardTerm(name="python", function="broken_rewards:f")],
                                  data=None)
    ((key, msg),) = check_python_rewards(0, stage)
    assert key == "stages.0.rewards.0.function"
    assert "importing 'broken_rewards' failed at " in msg and "broken_rewards.py:3" in msg
    assert "NameError: name 'undefined_name' is not defined" in msg


@pytest.mark.parametrize("fn", ["hangs", "spins_and_swallows"])
def test_a_hanging_reward_is_stopped_by_its_timeout_and_named_as_a_timeout(setup, fn):
    t0 = time.monotonic()
    msg = one(setup(fn, timeout_s=0.3))
    assert time.monotonic() - t0 < 5.0  # stopped at its limit (twice 0.3 s at most), not after 60 s
    assert "it timed out: ran past its timeout_s of 0.3s" in msg


EXTRA = '''
import asyncio, sys

async def trl_async(completions, **kwargs):
    await asyncio.sleep(0)
    return [1.0 for _ in completions]

def exits(task, completion):
    sys.exit(3)

class Scorer:
    def __call__(self, task, completion):
        return 1.0

scorer = Scorer()
'''


@pytest.mark.parametrize("fn, problem", [("trl_async", None), ("scorer", None), ("exits", "SystemExit: 3")])
def test_async_trl_rewards_and_callable_objects_work_and_sys_exit_is_a_failure(tmp_path, monkeypatch, fn, problem):
    (tmp_path / "extra_rewards.py").write_text(EXTRA)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "extra_rewards", raising=False)
    data = tmp_path / "t.jsonl"
    data.write_text(json.dumps({"id": "t1", "prompt": "1+2?", "answer": "3"}) + "\n")
    stage = types.SimpleNamespace(name="grpo", rewards=[RewardTerm(name="python", function=f"extra_rewards:{fn}")],
                                  data=JsonlTasks(path=str(data)))
    got = check_python_rewards(0, stage)
    if problem is None:
        assert got == []
    else:
        assert problem in one_at(got, 0)


def one_at(problems, j):
    ((key, msg),) = problems
    assert key == f"stages.0.rewards.{j}.function"
    return msg


def test_a_module_that_hangs_when_imported_is_named_as_an_import_timeout(tmp_path, monkeypatch):
    import rlvr.verifiers.reward_check as rc

    (tmp_path / "hanging_import.py").write_text("while True:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(rc, "IMPORT_TIMEOUT_S", 0.3)
    stage = types.SimpleNamespace(name="grpo", rewards=[RewardTerm(name="python", function="hanging_import:f",
                                                                   timeout_s=0.2)], data=None)
    t0 = time.monotonic()
    assert "importing 'hanging_import:f' timed out after 0.3s" in one_at(rc.check_python_rewards(0, stage), 0)
    assert time.monotonic() - t0 < 5.0
