"""Verifier for reasoning-gym tasks: the dataset's own ``score_answer(answer, entry)``.

Which part of the completion is the answer (``extract``; a task's ``gold["extract"]`` wins):
``auto`` (default) the content of the last ``\\boxed{...}``, else of the last ``<answer>...</answer>``,
else the last non-empty line; ``boxed`` / ``answer_tag`` / ``last_line`` only that rule; ``raw`` the
whole completion, stripped. No answer found -> outcome ``format``.

``passed`` means a score of exactly 1.0. Partial credit (``partial``): reasoning-gym's default scorer
pays ``len(oracle) / len(answer)`` when the oracle appears inside a longer answer, so an answer padded
with candidates (``3 4 5 6 7``) would outscore one plain wrong guess. ``clip`` (default) keeps a score
below 1.0 as the reward only when the answer does not contain the oracle (a dataset's real partial
credit, e.g. a near-miss); a padded superstring of the oracle scores 0. ``binary`` pays 1.0 or 0.0;
``raw`` pays the scorer's number unchanged (gameable: for measurement only). A task's
``gold["partial"]`` wins over the verifier's own setting.

A scorer that raises, or returns something that is not a number in [0, 1], is ``infra`` (never a
reward). Run it through :func:`rlvr.verifiers.pool.verify_batch` for the hard per-item timeout.
"""

from __future__ import annotations

import json
import math
import re
import time
from typing import Any

from rlvr.data.types import Task
from rlvr.verifiers.base import Verdict

EXTRACT_MODES = ("auto", "boxed", "answer_tag", "last_line", "raw")
PARTIAL_MODES = ("clip", "binary", "raw")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)
_END_MARKS = ("<|end|>", "<eos>")


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (nested braces balanced), or None."""
    start = text.rfind("\\boxed{")
    while start != -1:
        i, depth = start + len("\\boxed{"), 1
        for j in range(i, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[i:j].strip()
        start = text.rfind("\\boxed{", 0, start)  # unclosed: try an earlier one
    return None


def extract(completion: str, mode: str = "auto") -> str | None:
    """The part of ``completion`` scored as the answer under ``mode`` (module doc), or None."""
    text = completion
    for mark in _END_MARKS:
        text = text.split(mark)[0]
    if mode in ("auto", "boxed"):
        boxed = last_boxed(text)
        if boxed is not None or mode == "boxed":
            return boxed
    if mode in ("auto", "answer_tag"):
        tags = _ANSWER_TAG.findall(text)
        if tags or mode == "answer_tag":
            return tags[-1].strip() if tags else None
    if mode == "raw":
        return text.strip() or None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else None


class ReasoningGymVerifier:
    """Verifier for ``kind == "reasoning_gym"`` tasks (``rlvr.data.reasoning_gym``).

    extract: default answer rule (a task's ``gold["extract"]`` overrides it); partial: default ``clip`` |
    ``binary`` | ``raw`` (module doc; a task's ``gold["partial"]`` overrides it); max_answer_chars: a
    longer answer is ``wrong`` without scoring.
    """

    name = "reasoning_gym"

    def __init__(self, extract: str = "auto", partial: str = "clip", max_answer_chars: int = 10_000) -> None:
        if extract not in EXTRACT_MODES:
            raise ValueError(f"extract must be one of {EXTRACT_MODES}, got {extract!r}")
        if partial not in PARTIAL_MODES:
            raise ValueError(f"partial must be one of {PARTIAL_MODES}, got {partial!r}")
        self.extract, self.partial, self.max_answer_chars = extract, partial, int(max_answer_chars)
        self._datasets: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"extract": self.extract, "partial": self.partial, "max_answer_chars": self.max_answer_chars}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    @staticmethod
    def check_task(task: Task) -> str | None:
        """Why this verifier cannot judge ``task`` (None when it can)."""
        gold = task.gold or {}
        if not isinstance(gold.get("dataset"), str):
            return "field 'gold.dataset': a reasoning_gym task needs its dataset name"
        if not isinstance(gold.get("entry"), dict) or "answer" not in gold["entry"]:
            return "field 'gold.entry': a reasoning_gym task needs the dataset's entry (question, answer, metadata)"
        mode = gold.get("extract", "auto")
        if mode not in EXTRACT_MODES:
            return f"field 'gold.extract': {mode!r} is not one of {EXTRACT_MODES}"
        if gold.get("partial", "clip") not in PARTIAL_MODES:
            return f"field 'gold.partial': {gold['partial']!r} is not one of {PARTIAL_MODES}"
        return None

    def scorer(self, task: Task):
        """The dataset's ``score_answer`` (one dataset object per name and config, built on first use)."""
        from rlvr.data.reasoning_gym import make_dataset

        name, config = task.gold["dataset"], task.gold.get("config") or {}
        key = name + json.dumps(config, sort_keys=True, default=str)
        if key not in self._datasets:
            self._datasets[key] = make_dataset(name, config, seed=0, size=1)
        return self._datasets[key].score_answer

    def verify(self, task: Task, completion: str) -> Verdict:
        t0 = time.perf_counter()
        why = self.check_task(task)
        if why:
            return Verdict.infra(why)
        answer = extract(completion, task.gold.get("extract") or self.extract)
        if answer is None:
            return Verdict(0.0, False, "format", {"reason": "no answer found"}, time.perf_counter() - t0)
        if len(answer) > self.max_answer_chars:
            return Verdict(0.0, False, "wrong", {"reason": "answer too long", "answer_chars": len(answer)},
                           time.perf_counter() - t0)
        entry = task.gold["entry"]
        try:
            score = self.scorer(task)(answer, entry)
        except Exception as e:  # noqa: BLE001 - the dataset's scorer failing is the verifier's failure
            return Verdict.infra(f"score_answer raised {type(e).__name__}: {e}", time.perf_counter() - t0)
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score) \
                or not 0.0 <= score <= 1.0:
            return Verdict.infra(f"score_answer returned {score!r}, not a number in [0, 1]", time.perf_counter() - t0)
        score = float(score)
        passed = score == 1.0
        reward = self.reward(score, answer, entry, task.gold.get("partial") or self.partial)
        details = {"answer": answer[:200], "score": score}
        return Verdict(reward, passed, "pass" if passed else "wrong", details, time.perf_counter() - t0)

    @staticmethod
    def reward(score: float, answer: str, entry: dict[str, Any], partial: str = "clip") -> float:
        """The reward for a score under ``partial`` (module doc)."""
        if score == 1.0 or partial == "raw":
            return score
        if partial == "binary":
            return 0.0
        oracle = str(entry.get("answer", "")).strip()
        return 0.0 if oracle and oracle in answer else score
