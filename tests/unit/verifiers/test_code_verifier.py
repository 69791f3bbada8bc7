"""CodeVerifier: extraction, task formats, outcome classification, picklability, speed."""

from __future__ import annotations

import pickle
import statistics

import pytest

from rlvr.data.types import Task
from rlvr.verifiers.base import Verdict, Verifier
from rlvr.verifiers.code import CodeVerifier, asserts_to_check, extract_code, normalize_output

V = CodeVerifier(timeout_s=5.0)
ADD_CHECK = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(0, 0) == 0\n"
ADD = "def add(a, b):\n    return a + b\n"


def task(**gold):
    return Task(id="t", kind="code", prompt="solve it", gold=gold)


def fence(code, lang="python"):
    return f"Here you go:\n```{lang}\n{code}```\nDone."


# --- extraction ------------------------------------------------------------------------------------


def test_extract_prefers_the_fence_that_defines_the_entry_point():
    text = fence(ADD) + "\nUsage:\n" + fence("print(add(1, 2))\n")
    assert extract_code(text, "add") == ADD
    # without an entry point the last fence is the base; the fence defining the add() it calls joins it
    assert extract_code(text) == ADD + "\n\nprint(add(1, 2))\n"


def test_extract_python_fences_over_other_languages_and_bare_text():
    assert extract_code(fence("echo hi\n", "bash") + fence(ADD, "py"), "add") == ADD
    assert extract_code(fence(ADD, ""), "add") == ADD  # unlabelled fence
    assert extract_code("```python\n" + ADD, "add") == ADD  # unclosed fence (truncated generation)
    assert extract_code(ADD) == ADD  # bare completion
    assert extract_code("   \n") == ""


def test_empty_completion_is_format():
    v = V.verify(task(entry_point="add", tests=ADD_CHECK), "   ")
    assert (v.outcome, v.reward) == ("format", 0.0)


# --- formats ---------------------------------------------------------------------------------------


def test_humaneval_style_pass_and_wrong():
    t = task(entry_point="add", tests=ADD_CHECK)
    good, bad = V.verify(t, fence(ADD)), V.verify(t, fence("def add(a, b):\n    return a * b\n"))
    assert (good.outcome, good.reward, good.passed) == ("pass", 1.0, True)
    assert (bad.outcome, bad.reward, bad.passed) == ("wrong", 0.0, False)


def test_prompt_is_the_prelude_and_a_body_continues_it():
    prompt = 'import math\n\ndef helper(x):\n    return x * 2\n\n\ndef f(x):\n    """Double then sqrt."""\n'
    t = Task(
        id="p",
        kind="code",
        prompt=prompt,
        gold={
            "entry_point": "f",
            "tests": "def check(candidate):\n    assert candidate(8) == math.sqrt(helper(8))\n",
        },
    )
    assert (
        V.verify(t, "    return math.sqrt(helper(x))\n").outcome == "pass"
    )  # body only (HumanEval completion)
    assert (
        V.verify(t, fence("def f(x):\n    return math.sqrt(helper(x))\n")).outcome == "pass"
    )  # full function


def test_assert_list_and_assert_string_with_inferred_entry_point():
    lst = task(tests=["assert add(1, 2) == 3", "assert add(2, 2) == 4"])
    assert V.verify(lst, ADD).outcome == "pass"
    assert V.verify(lst, "def add(a, b):\n    return 3\n").outcome == "wrong"
    s = task(tests="assert add(1, 2) == 3\nassert abs(add(0.1, 0.2) - 0.3) < 1e-9\n")
    assert V.verify(s, ADD).outcome == "pass"


def test_asserts_to_check_binds_the_name_to_the_candidate():
    src = asserts_to_check(["assert f(1) == 2"], "f")
    ns = {}
    exec(src, ns)  # noqa: S102
    ns["check"](lambda x: x + 1)
    with pytest.raises(AssertionError):
        ns["check"](lambda x: x)


def test_io_tests_whitespace_normalised():
    t = task(io_tests=[{"input": "1 2\n", "output": "3\n"}, {"input": "10   20", "output": "  30  \n\n"}])
    assert V.verify(t, fence("a, b = map(int, input().split())\nprint(a + b)\n")).outcome == "pass"
    assert V.verify(t, fence("print(3)\n")).outcome == "wrong"
    crash = V.verify(t, fence("raise ValueError('boom')\n"))
    assert crash.outcome == "crash" and "boom" in crash.details["stderr"]
    assert normalize_output("\n a  b \t\n\nc \n\n") == "a b\n\nc"


def test_hidden_tests_must_pass_too():
    lookup = "def add(a, b):\n    return {(1, 2): 3, (0, 0): 0}[(a, b)]\n"
    t = task(entry_point="add", tests=ADD_CHECK, hidden_tests=["assert add(5, 6) == 11"])
    assert (
        V.verify(task(entry_point="add", tests=ADD_CHECK), lookup).outcome == "pass"
    )  # visible only: fooled
    v = V.verify(t, lookup)
    assert v.reward == 0.0 and v.details["block"] == "hidden_tests"
    assert V.verify(t, ADD).outcome == "pass"
    io = task(io_tests=[{"input": "", "output": "1"}], hidden_tests=[{"input": "", "output": "2"}])
    assert V.verify(io, "print(1)").details["block"] == "hidden_tests"


# --- outcome classification --------------------------------------------------------------------------


def test_value_types_cross_exactly():
    tests = (
        "def check(candidate):\n    r = candidate()\n    assert type(r) is tuple and r[0] is True\n"
        "    assert type(r[1]) is set and r[2] == {(1, 2): [None]} and r[3] != r[3]\n"
    )
    t = task(entry_point="f", tests=tests)
    assert V.verify(t, "def f():\n    return (True, {1}, {(1, 2): [None]}, float('nan'))\n").outcome == "pass"
    assert (
        V.verify(t, "def f():\n    return [True, {1}, {(1, 2): [None]}, float('nan')]\n").outcome == "wrong"
    )


def test_expected_exceptions_cross_as_builtin_types():
    tests = (
        "def check(candidate):\n    try:\n        candidate(-1)\n    except ValueError:\n        pass\n"
        "    else:\n        assert False\n    assert candidate(4) == 2\n"
    )
    t = task(entry_point="root", tests=tests)
    good = "def root(x):\n    if x < 0:\n        raise ValueError('negative')\n    return int(x ** 0.5)\n"
    assert V.verify(t, good).outcome == "pass"
    assert (
        V.verify(
            task(entry_point="root", tests="def check(c):\n    c(1)\n"), "def root(x):\n    1/0\n"
        ).outcome
        == "crash"
    )


@pytest.mark.parametrize(
    "tests",
    [
        "import unittest\ndef check(candidate):\n    raise unittest.SkipTest('not today')\n",
        "def check(candidate):\n    candidate(1, 2) + None\n",
        "import sys\ndef check(candidate):\n    sys.exit(0)\n",
    ],
)
def test_any_exception_in_the_tests_is_a_failure(tests):
    v = V.verify(task(entry_point="add", tests=tests), ADD)
    assert v.outcome == "wrong" and v.reward == 0.0


@pytest.mark.parametrize(
    "gold",
    [
        {
            "entry_point": "add",
            "tests": "def check(candidate):\n    candidate(lambda: 0)\n",
        },  # non-plain argument
        {"entry_point": "add", "tests": "this is not python ("},
        {"entry_point": "add", "tests": "def helper():\n    pass\n"},  # no check(), no asserts
        {"entry_point": "add"},  # no tests at all
        {"io_tests": [{"input": 1}]},
    ],
)
def test_unusable_tasks_are_infra_not_wrong(gold):
    v = V.verify(task(**gold), ADD)
    assert v.outcome == "infra" and v.reward == 0.0 and "error" in v.details


def test_missing_entry_point_is_a_crash():
    v = V.verify(task(entry_point="add", tests=ADD_CHECK), "def plus(a, b):\n    return a + b\n")
    assert v.outcome == "crash" and "add" in v.details["error"]


def test_required_isolation_is_enforced():
    v = CodeVerifier(isolation="rlimits", require_isolation="bwrap+uid").verify(
        task(entry_point="add", tests=ADD_CHECK), ADD
    )
    assert v.outcome == "infra" and "weaker" in v.details["error"]


# --- protocol, pickling, speed ----------------------------------------------------------------------


def test_protocol_and_pickle():
    v = CodeVerifier(timeout_s=3.0, memory_mb=512)
    assert isinstance(v, Verifier) and v.name == "code"
    w = pickle.loads(pickle.dumps(v))
    assert w == v and w.name == "code"
    out = w.verify(task(entry_point="add", tests=ADD_CHECK), ADD)
    assert isinstance(out, Verdict) and out.outcome == "pass" and out.seconds > 0


def test_typical_verification_is_well_under_a_second():
    t = task(entry_point="add", tests=ADD_CHECK)
    secs = [V.verify(t, ADD).seconds for _ in range(5)]
    assert statistics.median(secs) < 1.0, secs


def test_big_integers_cross_the_boundary():
    t = task(
        entry_point="fact",
        tests="import math\ndef check(candidate):\n    assert candidate(3000) == math.factorial(3000)\n",
    )  # 9131 digits
    assert V.verify(t, "import math\ndef fact(n):\n    return math.factorial(n)\n").outcome == "pass"


def test_debug_output_past_the_cap_is_truncated_not_a_violation_in_function_tests():
    """In function-call tests the candidate's prints are never part of the verdict: past the output cap
    they are drained and dropped, and a right answer still passes. (In stdin/stdout tests the output IS
    the answer, and past the cap it stays a violation: test_code_sandbox.)"""
    v = CodeVerifier(timeout_s=5.0, output_limit_bytes=10_000)
    chatty = "def add(a, b):\n    print('#' * 50_000)\n    import sys; print('!' * 50_000, file=sys.stderr)\n    return a + b\n"
    res = v.verify(task(tests=ADD_CHECK, entry_point="add"), fence(chatty))
    assert res.outcome == "pass", res.details
    wrong = v.verify(task(tests=ADD_CHECK, entry_point="add"), fence(chatty.replace("a + b", "a - b")))
    assert wrong.outcome == "wrong"
