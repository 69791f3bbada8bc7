"""SQL verifier fidelity: equivalent queries pass on every variant, different results do not; under an
ordered gold, rows tied on its ORDER BY keys may come in any order (fidelity/sql_cases.py)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from rlvr.data.types import Task
from rlvr.verifiers.sql import SqlVerifier

sys.path.insert(0, str(Path(__file__).parent / "fidelity"))
from sql_cases import CASES, ROWS, SCHEMA


@pytest.fixture(scope="module")
def sv():
    return SqlVerifier(timeout_s=2.0)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_sql_fidelity_case(sv, case):
    category, gold_sql, completion, expected = case
    schemas = [SCHEMA.format(rows=r) for r in ROWS]
    task = Task(id=category, prompt="?", kind="sql", gold={"gold_sql": gold_sql, "schema_sql": schemas},
                answer_format="code_fence")
    v = sv.verify(task, completion)
    assert v.outcome == expected, f"{gold_sql!r} vs {completion!r}: {v.outcome} {v.details}"


def test_sql_fidelity_suite_is_broad():
    assert len(CASES) >= 50 and Counter(c[3] for c in CASES)["wrong"] >= 20
