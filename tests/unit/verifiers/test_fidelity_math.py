"""Math verifier fidelity: ordinary answers in every common form pass, near misses and hedges do not.

Cases live in ``fidelity/math_cases.tsv`` (category, gold, answer, expected), each worked out by hand.
A failure names the case; the last test checks the suite keeps its breadth.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from rlvr.data.types import Task
from rlvr.verifiers.math import MathVerifier

CASES_FILE = Path(__file__).parent / "fidelity" / "math_cases.tsv"


def load_cases() -> list[tuple[str, str, str, str]]:
    out = []
    for n, line in enumerate(CASES_FILE.read_text().splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        assert len(parts) == 4 and parts[3] in ("pass", "wrong", "format"), f"{CASES_FILE.name}:{n}: {line!r}"
        out.append((parts[0], parts[1], parts[2], parts[3]))
    return out


CASES = load_cases()


@pytest.fixture(scope="module")
def mv():
    v = MathVerifier(timeout_s=10.0)
    yield v
    v.close()


def completion(answer: str) -> str:
    return answer if "\\boxed" in answer or "\\fbox" in answer or answer.startswith("the ") else rf"\boxed{{{answer}}}"


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_math_fidelity_case(mv, case):
    category, gold, answer, expected = case
    v = mv.verify(Task(id=category, prompt="?", kind="math", gold={"answer": gold}), completion(answer))
    assert v.outcome == expected, f"gold {gold!r}, answer {answer!r}: {v.outcome} ({v.details})"


def test_math_fidelity_suite_is_broad():
    per = Counter(c[0] for c in CASES)
    verdicts = Counter(c[3] for c in CASES)
    assert len(CASES) >= 300 and len(per) >= 20, per
    assert verdicts["wrong"] >= 100, verdicts  # a near miss or hedge for every class of correct form
    assert all(any(c[0] == cat and c[3] == "wrong" for c in CASES) for cat in per if cat != "format"), per


def _bench_sample(step: int = 20) -> list[tuple[str, str, str, str]]:
    """Every ``step``-th case of ``bench/math_fidelity.py`` (the generated suite: ~1,900 completions)."""
    import importlib.util

    path = Path(__file__).resolve().parents[3] / "bench" / "math_fidelity.py"
    spec = importlib.util.spec_from_file_location("math_fidelity_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.all_cases()[::step]


BENCH = _bench_sample()


@pytest.mark.parametrize("case", BENCH, ids=[f"bench-{c[0]}-{i}" for i, c in enumerate(BENCH)])
def test_math_bench_sample(mv, case):
    category, gold, comp, expected = case
    v = mv.verify(Task(id=category, prompt="?", kind="math", gold={"answer": gold}), comp)
    assert (v.outcome == "pass") == (expected == "pass"), f"gold {gold!r}, {comp!r}: {v.outcome} ({v.details})"
