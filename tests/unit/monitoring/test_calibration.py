"""Calibration: the expected calibration error by hand, the two confidence measures, and the held-out
evaluation writing both (eval.json's ``calibration``, summary rows' ``ece_*``, the summary table)."""

import math

import pytest

from rlvr.data.types import Task
from rlvr.monitoring.calibration import agreement, answer_key, answer_probability, expected_calibration_error
from rlvr.monitoring.evaluate import evaluate
from rlvr.rollout.engine import Generation
from rlvr.verifiers.base import Verdict


def test_ece_by_hand():
    # 10 bins. bin 9 [0.9, 1]: confidences 0.95, 0.95, 1.0 (mean 0.9667), 2 of 3 right (0.6667): gap 0.3
    # bin 5 [0.5, 0.6): 0.5, 0.55 (mean 0.525), 1 of 2 right (0.5): gap 0.025
    # bin 1 [0.1, 0.2): 0.1 (mean 0.1), 0 of 1 right: gap 0.1
    # ECE = 3/6 * 0.3 + 2/6 * 0.025 + 1/6 * 0.1 = 0.15 + 0.0083333 + 0.0166667 = 0.175
    conf = [0.95, 0.95, 1.0, 0.5, 0.55, 0.1]
    ok = [True, True, False, True, False, False]
    assert expected_calibration_error(conf, ok, bins=10) == pytest.approx(0.175, abs=1e-12)
    # over- and under-confidence cancel within a bin: 0.9 wrong, 0.1 right -> 10 bins: 0.5 * 0.9 + 0.5 * 0.9 = 0.9;
    # one bin: |mean confidence 0.5 - accuracy 0.5| = 0
    assert expected_calibration_error([0.9, 0.1], [False, True], bins=10) == pytest.approx(0.9)
    assert expected_calibration_error([0.9, 0.1], [False, True], bins=1) == 0.0
    # perfectly calibrated within each bin: 0; confident and always wrong: the confidence itself
    assert expected_calibration_error([0.5, 0.5], [True, False], bins=10) == 0.0
    assert expected_calibration_error([1.0, 1.0], [False, False]) == 1.0
    assert expected_calibration_error([], []) is None


def test_ece_refuses_bad_input():
    with pytest.raises(ValueError, match="outside"):
        expected_calibration_error([1.2], [True])
    with pytest.raises(ValueError, match="2 confidences for 1"):
        expected_calibration_error([0.1, 0.2], [True])


def test_the_two_confidence_measures():
    # answer probability: exp(-0.1 - 0.2) = 0.7408182
    assert answer_probability([-0.1, -0.2]) == pytest.approx(math.exp(-0.3))
    assert answer_probability([]) == 1.0
    # agreement: 3 of 5 samples say "7"; the majority answer's first sample (index 1) is right
    assert agreement(["8", "7", "7", "9", "7"], [False, True, True, False, True]) == (0.6, True)
    # a tie goes to the answer sampled first ("8"), judged by its first sample
    assert agreement(["8", "7", "8", "7"], [False, True, False, True]) == (0.5, False)
    math_task = Task(id="m", prompt="2+5=?", answer_format="last_number")
    assert answer_key(math_task, "the sum is 7") == answer_key(math_task, "7") == "7"
    assert answer_key(Task(id="c", kind="code"), "  def f():\n   return 1 ") == "def f(): return 1"


class FixedEngine:
    """Greedy: completion "7" with logprobs [-0.1, -0.2] for every prompt; sampled: the listed texts."""

    def __init__(self, sampled):
        self.sampled = sampled

    def generate(self, prompts, params):
        if params.greedy:
            rows = [("7", [-0.1, -0.2])] * len(prompts)
        else:
            rows = [(t, [-1.0]) for i in range(len(prompts)) for t in self.sampled[i]]
        n = 1 if params.greedy else params.n
        return Generation(prompt_ids=[p for p in prompts for _ in range(n)], completion_ids=[[5] * len(lp) for _, lp in rows],
                          old_logprobs=[lp for _, lp in rows], finish_reason=["stop"] * len(rows),
                          texts=[t for t, _ in rows], prompt_index=[i for i in range(len(prompts)) for _ in range(n)])


def test_evaluate_writes_both_measures_and_the_summary_shows_them(tiny_dir, capsys):
    from transformers import AutoTokenizer

    tiny_tok = AutoTokenizer.from_pretrained(tiny_dir)
    tasks = [Task(id="a", prompt="3+4=?", gold={"answer": "7"}, answer_format="last_number"),
             Task(id="b", prompt="3+5=?", gold={"answer": "8"}, answer_format="last_number")]

    def judge(ts, completions):
        return [Verdict(1.0 if c.strip() == t.gold["answer"] else 0.0, c.strip() == t.gold["answer"],
                        "pass" if c.strip() == t.gold["answer"] else "wrong") for t, c in zip(ts, completions)]

    eng = FixedEngine([["7", "7", "7", "1"], ["7", "8", "8", "3"]])
    res = evaluate(eng, tiny_tok, tasks, judge, calibration_samples=4)
    cal = res["calibration"]
    # answer probability 0.7408 for both greedy "7"s: a right, b wrong; one bin: |0.7408 - 0.5| = 0.2408
    assert cal["answer_prob"]["ece"] == pytest.approx(abs(math.exp(-0.3) - 0.5))
    # agreement: a 0.75 (majority "7", right), b 0.5 ("8", right): bin 7 gap 0.25, bin 5 gap 0.5 -> 0.375
    assert cal["agreement"]["ece"] == pytest.approx(0.375) and cal["samples"] == 4
    assert "pass_at_4_sampled" not in res                       # calibration samples are not pass@k
    assert "agreement" not in evaluate(eng, tiny_tok, tasks, judge)["calibration"]

    from rlvr.commands.run import print_summary
    from rlvr.pipeline import _row

    row = _row("grpo", res, 1.0, "ckpt")
    assert row["ece_answer_prob"] == cal["answer_prob"]["ece"] and row["ece_agreement"] == 0.375
    print_summary({"stages": [row]})
    out = capsys.readouterr().out
    assert "ECE" in out and "0.375" in out
