"""The reasoning-gym verifier: its verdicts are the dataset's own score_answer (gold and corrupted answers,
every registry entry but the committed slow ones), padded answers earn nothing, a raising scorer is infra."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")

from reasoning_gym.factory import DATASETS  # noqa: E402

from rlvr.data.reasoning_gym import make_dataset, to_task  # noqa: E402
from rlvr.verifiers.reasoning_gym import ReasoningGymVerifier, extract  # noqa: E402
from rlvr.verifiers.registry import get_verifier  # noqa: E402

SLOW = {k for k in json.loads((Path(__file__).with_name("reasoning_gym_slow.json")).read_text()) if k != "_about"}


def _corrupt(answer: str) -> str:
    return answer[::-1] + "7" if answer else "7"


def test_verdicts_equal_the_datasets_own_scorer_on_gold_and_corrupted_answers():
    v = get_verifier("reasoning_gym", extract="raw", partial="raw")
    checked, raised = 0, []
    for name in sorted(set(DATASETS) - SLOW):
        ds = make_dataset(name, {}, seed=0, size=2)
        for i in range(2):
            entry = ds[i]
            task = to_task(name, {}, entry, i, "train", "raw", "raw")
            gold = str(entry["answer"]).strip() if entry["answer"] is not None else ""
            for ans in {gold, _corrupt(gold)} - {""}:
                got = v.verify(task, ans)
                try:
                    want = ds.score_answer(ans, entry)
                except Exception:  # noqa: BLE001 - some scorers raise on a malformed answer: infra, never a reward
                    assert got.outcome == "infra" and got.reward == 0, (name, ans, got)
                    raised.append(name)
                    continue
                assert got.outcome in ("pass", "wrong"), (name, ans, got)
                assert got.details["score"] == pytest.approx(float(want)), (name, ans)
                assert got.passed == (float(want) == 1.0) and got.reward == pytest.approx(float(want)), (name, ans)
                checked += 1
    assert checked > 2 * len(DATASETS) and len(raised) < 10, raised


def _task(name="chain_sum"):
    entry = make_dataset(name, {}, seed=0, size=1)[0]
    return to_task(name, {}, entry, 0, "heldout", "auto"), str(entry["answer"])


def test_padding_with_candidates_never_outscores_a_single_wrong_answer():
    task, oracle = _task()
    v = ReasoningGymVerifier()
    single = v.verify(task, f"\\boxed{{{int(oracle) + 1}}}")
    padded = v.verify(task, f"\\boxed{{0 1 {oracle} 2 3}}")
    raw_task = replace(task, gold={**task.gold, "partial": "raw"})
    assert v.verify(raw_task, f"\\boxed{{0 1 {oracle} 2 3}}").reward > 0  # the hack the clip closes
    assert padded.reward == 0 <= single.reward and not padded.passed and padded.outcome == "wrong"
    assert v.verify(task, f"work...\n\\boxed{{{oracle}}}").reward == 1.0


def test_padding_probes_pass():
    from rlvr.verifiers.probes.runner import run_probes

    rows, _ = run_probes("reasoning_gym")
    assert len(rows) >= 2 and all(r.ok for r in rows), rows


def test_a_scorer_that_raises_or_returns_nonsense_is_infra(monkeypatch):
    task, oracle = _task()
    v = ReasoningGymVerifier()
    ds = v.scorer(task).__self__

    def boom(answer, entry):
        raise RuntimeError("scorer bug")

    monkeypatch.setattr(ds, "score_answer", boom)
    got = v.verify(task, f"\\boxed{{{oracle}}}")
    assert got.outcome == "infra" and got.reward == 0 and "scorer bug" in got.details["error"]
    monkeypatch.setattr(ds, "score_answer", lambda a, e: float("nan"))
    assert v.verify(task, f"\\boxed{{{oracle}}}").outcome == "infra"


def test_answer_extraction_rules():
    assert extract("a\n\\boxed{x{1}} then <answer>y</answer>") == "x{1}"
    assert extract("think <answer> y </answer>\nlast") == "y"
    assert extract("think\n  last line  \n\n") == "last line"
    assert extract("\\boxed{3}<|end|>junk") == "3"
    assert extract("no box", "boxed") is None and extract("", "auto") is None
    task, _ = _task()
    assert ReasoningGymVerifier().verify(task, "   ").outcome == "format"


def test_a_task_without_its_entry_is_refused_before_judging():
    from rlvr.data.types import Task
    from rlvr.verifiers.registry import task_problem

    assert "gold.entry" in task_problem(Task(id="x", kind="reasoning_gym", gold={"dataset": "chain_sum"}))
