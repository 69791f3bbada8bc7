"""Calibration of a policy's confidence against correctness on held-out problems: the expected calibration
error (ECE) of two confidence measures, defined before any run (docs/evaluation.md, "Calibration"):

* **answer probability** — the probability the model gives its own greedy answer: ``exp(sum of the greedy
  completion's token logprobs)`` under the unscaled distribution (temperature 1), i.e. the sequence
  probability; correct = the greedy answer passes the verifier;
* **agreement** — with ``m`` samples per problem at the evaluation temperature, the share of the samples
  whose answer is the majority answer; correct = the majority answer's first sample passes. A sample's
  answer is its extracted final answer for math tasks (the task's ``answer_format``), else the
  whitespace-normalised completion.

``ECE = sum_b (n_b / N) |accuracy_b - mean confidence_b|`` over ``bins`` equal-width confidence bins of
[0, 1] (a confidence of exactly 1 falls in the last bin). RLVR is said to harm calibration (the model grows
confident, right or wrong): the per-stage figures in ``summary.json`` let that claim be read off any run.
"""

from __future__ import annotations

import math
from collections import Counter

from rlvr.verifiers.extract import extract_answer, normalize_answer


def expected_calibration_error(confidence: list[float], correct: list[bool], bins: int = 10) -> float | None:
    """ECE of ``confidence`` (each in [0, 1]) against ``correct`` over ``bins`` equal-width bins; None when
    there is nothing to score. Raises ValueError on mismatched lengths or a confidence outside [0, 1]."""
    if len(confidence) != len(correct):
        raise ValueError(f"expected_calibration_error: {len(confidence)} confidences for {len(correct)} outcomes")
    if bins < 1:
        raise ValueError(f"expected_calibration_error: bins must be >= 1, got {bins}")
    if not confidence:
        return None
    sums: dict[int, list[float]] = {}
    for c, ok in zip(confidence, correct):
        if not (0.0 <= c <= 1.0) or math.isnan(c):
            raise ValueError(f"expected_calibration_error: confidence {c} outside [0, 1]")
        b = sums.setdefault(min(int(c * bins), bins - 1), [0.0, 0.0, 0])
        b[0], b[1], b[2] = b[0] + c, b[1] + float(bool(ok)), b[2] + 1
    n = len(confidence)
    return sum(k / n * abs(acc / k - conf / k) for conf, acc, k in sums.values())


def answer_key(task, text: str) -> str:
    """What counts as "the same answer" for the agreement measure: a math task's extracted final answer
    (its ``answer_format``; "" when none is found), else the whitespace-normalised completion."""
    if task.kind == "math":
        ext = extract_answer(text, task.answer_format or "boxed")
        return normalize_answer(ext.answer) if ext.found else ""
    return normalize_answer(text)


def answer_probability(logprobs: list[float]) -> float:
    """The sequence probability ``exp(sum logprobs)`` of a completion (1.0 for an empty one)."""
    return math.exp(min(0.0, math.fsum(logprobs)))


def agreement(keys: list[str], passed: list[bool]) -> tuple[float, bool]:
    """(share of the samples giving the majority answer, whether the majority answer is right: its first
    sample's verdict). Ties go to the answer sampled first."""
    counts = Counter(keys)
    top = max(counts.values())
    majority = next(k for k in keys if counts[k] == top)
    return top / len(keys), passed[keys.index(majority)]


def summarise(confidence: list[float], correct: list[bool], bins: int) -> dict:
    """``{"ece", "confidence", "accuracy", "n"}`` of one confidence measure (means over the problems)."""
    n = len(confidence)
    return {"ece": expected_calibration_error(confidence, correct, bins),
            "confidence": sum(confidence) / n if n else None,
            "accuracy": sum(map(bool, correct)) / n if n else None, "n": n}
