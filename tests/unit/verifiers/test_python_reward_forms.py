"""Python rewards in a run's judge and in ``rlvr verify --reward``: TRL's batched form receives TRL's keyword
lists (prompts, completions, completion ids, every dataset column) and None means "does not apply"; a failing
call is an ``infra`` verdict carrying the function's own error and location."""

import itertools
import json
import os
from pathlib import Path

import pytest

import rlvr
from rlvr.config.rl import RewardTerm
from rlvr.data.types import Completion, Task
from rlvr.errors import ConfigError
from rlvr.verifiers.judge import reward_judge
from rlvr.verifiers.reward_call import reward_form

REWARDS = '''
SEEN = []

def record(prompts, completions, completion_ids, **kwargs):
    SEEN.append(dict(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs))
    return [float(len(c)) for c in completion_ids]

def only_kwargs(**kwargs):
    return [1.0 if a in (c if isinstance(c, str) else c[0]["content"]) else 0.0
            for c, a in zip(kwargs["completions"], kwargs["answer"])]

def per_row(task, completion):
    return 0.5

def maybe(completions, **kwargs):
    return [None if c.startswith("skip") else 1.0 for c in completions]

def broken(task, completion):
    return task.gold["answr"]
'''

_n = itertools.count()


@pytest.fixture
def mod(tmp_path, monkeypatch):
    name = f"form_rewards_{next(_n)}"
    (tmp_path / f"{name}.py").write_text(REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return name


def terms(mod, *fns, correct=False):
    return ([RewardTerm()] if correct else []) + [RewardTerm(name="python", function=f"{mod}:{f}") for f in fns]


TASKS = [Task("a", prompt="1+2?", gold={"answer": "3"}, meta={"source": "s1"}),
         Task("b", prompt="2+2?", gold={"answer": "4"}, messages=[{"role": "system", "content": "Be brief."},
                                                                 {"role": "user", "content": "2+2?"}])]


@pytest.mark.parametrize("sig, form", [("(task, completion)", "task"), ("(t, c, **kw)", "task"),
                                       ("(completions, **kwargs)", "batch"), ("(**kwargs)", "batch"),
                                       ("(prompts, completion_ids, answer)", "batch"),
                                       ("(completions, *, answer)", "batch")])
def test_the_form_is_read_from_the_parameters(sig, form):
    ns: dict = {}
    exec(compile(f"def f{sig}: pass", "<signature>", "exec"), ns)  # noqa: S102 - a signature under test
    assert reward_form(ns["f"], "m:f") == form


def test_trl_form_receives_trl_keyword_lists_for_the_whole_batch(mod):
    import importlib

    judge = reward_judge(terms(mod, "record"), workers=0)
    comps = [Completion("3", [7, 8]), Completion("five", [9, 10, 11])]
    verdicts = judge(TASKS, comps)
    (seen,) = importlib.import_module(mod).SEEN
    assert seen["prompts"] == ["1+2?", [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]]
    # TRL: plain text for a text prompt, an assistant message for a chat prompt
    assert seen["completions"] == ["3", [{"role": "assistant", "content": "five"}]]
    assert seen["completion_ids"] == [[7, 8], [9, 10, 11]]  # the sampled ids, not a re-encoding
    assert seen["answer"] == ["3", "4"] and seen["source"] == ["s1", None] and seen["id"] == ["a", "b"]
    assert callable(seen["log_metric"]) and callable(seen["log_extra"])
    assert [v.details["rewards"]["record"] for v in verdicts] == [2.0, 3.0]
    assert [v.outcome for v in verdicts] == ["pass", "pass"]  # no 'correct' term: the python sum decides


def test_both_forms_together_with_the_task_verifier(mod):
    judge = reward_judge(terms(mod, "per_row", "only_kwargs", correct=True), workers=0)
    v1, v2 = judge(TASKS, ["\\boxed{3}", "\\boxed{5}"])
    assert (v1.outcome, v2.outcome) == ("pass", "wrong")  # the task verifier decides with 'correct'
    assert v1.details["rewards"] == {"per_row": 0.5, "only_kwargs": 1.0}
    assert v2.details["rewards"] == {"per_row": 0.5, "only_kwargs": 0.0}


def test_none_means_does_not_apply_and_a_row_no_reward_applies_to_is_infra(mod):
    plain = [TASKS[0], Task("c", prompt="5+5?", gold={"answer": "10"})]
    v1, v2 = reward_judge(terms(mod, "maybe", "per_row"), workers=0)(plain, ["skip me", "fine"])
    assert v1.outcome == "pass" and v1.reward == 0.5 and v1.details["not_applicable"] == ["maybe"]
    assert v2.reward == 1.5
    (only,) = reward_judge(terms(mod, "maybe"), 0)(plain[:1], ["skip"])
    assert only.outcome == "infra" and "no reward applies" in only.details["error"]


@pytest.mark.parametrize("workers", [0, 1])
def test_a_failing_call_is_infra_with_the_users_error_and_location(mod, workers):
    (v,) = reward_judge(terms(mod, "broken", correct=True), workers)(TASKS[:1], ["\\boxed{3}"])
    assert v.outcome == "infra"
    assert "KeyError: 'answr'" in v.details["error"] and f"{mod}.py:19 in broken" in v.details["where"]
    assert 'return task.gold["answr"]' in v.details["traceback"]


def test_a_signature_of_neither_form_is_refused_when_the_judge_is_built(tmp_path, monkeypatch):
    (tmp_path / "sig_rewards.py").write_text("def f(a, b, c):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"'sig_rewards:f'\(a, b, c\) cannot be called as f\(task, completion\)"):
        reward_judge([RewardTerm(name="python", function="sig_rewards:f")], 0)


def test_verify_with_reward_matches_the_runs_judge(mod, tmp_path):
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "a", "prompt": "1+2?", "answer": "3"}, {"id": "b", "prompt": "2+2?", "answer": "4"}]))
    (tmp_path / "c.jsonl").write_text(json.dumps({"task_id": "a", "completion": "\\boxed{3}", "completion_ids": [1, 2]})
                                      + "\n" + json.dumps({"task_id": "b", "completion": "\\boxed{5}", "completion_ids": [3]}) + "\n")
    s = rlvr.verify(str(tmp_path / "t.jsonl"), str(tmp_path / "c.jsonl"), str(tmp_path / "v.jsonl"), workers=0,
                    details=True, rewards=["correct", f"{mod}:per_row", f"{mod}:record"])
    rows = [json.loads(x) for x in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert s["counts"] == {"pass": 1, "wrong": 1}
    assert [r["outcome"] for r in rows] == ["pass", "wrong"]
    assert rows[0]["details"]["rewards"] == {"per_row": 0.5, "record": 2.0}  # the file's completion_ids
    tasks = [Task("a", prompt="1+2?", gold={"answer": "3"}, answer_format="boxed"),
             Task("b", prompt="2+2?", gold={"answer": "4"}, answer_format="boxed")]
    same = reward_judge(terms(mod, "per_row", correct=True), 0)(tasks, ["\\boxed{3}", "\\boxed{5}"])
    assert [v.outcome for v in same] == [r["outcome"] for r in rows]


def test_verify_reward_exits_3_when_every_verdict_is_infra_and_prints_the_cause(mod, tmp_path):
    import subprocess
    import sys

    (tmp_path / "t.jsonl").write_text(json.dumps({"id": "a", "prompt": "1+2?", "answer": "3"}) + "\n")
    (tmp_path / "c.jsonl").write_text(json.dumps({"task_id": "a", "completion": "3"}) + "\n")
    r = subprocess.run([sys.executable, "-m", "rlvr.cli", "verify", "--tasks", "t.jsonl", "--completions", "c.jsonl",
                        "--reward", f"{mod}:broken", "--workers", "0", "--out", "v.jsonl"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
                       env={**os.environ, "COLUMNS": "300", "PYTHONPATH": str(Path(rlvr.__file__).parents[1])})
    assert r.returncode == 3, r.stderr
    assert "KeyError: 'answr'" in r.stdout and f"{mod}.py:19 in broken" in " ".join(r.stdout.split())
    with pytest.raises(ConfigError, match=r"--reward 'nope': expected 'module:function'"):
        rlvr.verify(str(tmp_path / "t.jsonl"), str(tmp_path / "c.jsonl"), str(tmp_path / "v.jsonl"), rewards=["nope"])
