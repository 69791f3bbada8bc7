"""Math verifier: final answer vs the gold answer, on HF math-verify in a killable worker process.

Pipeline for one completion:

1. refuse completions over ``max_completion_chars`` (outcome ``format``, reason "too long") -- the
   extraction below is linear anyway, this bounds everything after it;
2. extract the final answer in the task's ``answer_format`` (:mod:`rlvr.verifiers.extract`); nothing
   extractable -> ``format``;
3. hedges are ``wrong``: more than ``max_candidates`` different final answers, any connective
   ("or", ``\\lor``, ``\\pm``, ...) the gold lacks, and -- in the worker -- a set, interval, tuple or
   (in)equality where the gold is one value. Several different final answers pass only when every one
   of them is equivalent to the gold (``\\boxed{1/2}`` ... ``\\boxed{0.5}``);
4. fast path: gold and every answer are plain integers/decimals -> exact :class:`~decimal.Decimal`
   comparison in-process (``3`` == ``3.0``), no worker, a few microseconds;
5. otherwise math-verify ``parse`` + ``verify`` runs in a persistent child process
   (:mod:`rlvr.verifiers._math_worker`) with a soft timer inside and a hard kill at ``timeout_s``; a
   killed worker is replaced on the next call. Outcome ``timeout`` when the limit is hit.

Protects against: hedging, sympy bombs (``9^{9^{9^9}}``: refused by a magnitude guard, else killed),
memory bombs (the worker's address space is capped), megabyte completions, text that asks the grader
to accept (the text is never read, only the extracted answer). Model text is never given to ``eval``
or ``sympify``. Does not protect against: a gold answer that is itself wrong or ambiguous, or
math-verify's own equivalence mistakes.

Concurrency: one worker per verifier instance, calls serialised by a lock. For parallel throughput use
:func:`rlvr.verifiers.pool.verify_batch`, which gives each pool process its own copy.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from rlvr.data.types import Task
from rlvr.verifiers.base import Verdict
from rlvr.verifiers.extract import extract_answer
from rlvr.verifiers.math_answer import Item, fast_equal, parse_answer, plan

WORKER_PATH = str(Path(__file__).with_name("_math_worker.py"))
REL_TOL = 1e-9
"""Default relative tolerance when a decimal is compared (fast path and worker alike): float noise
(``0.30000000000000004``, a printed ``2\\pi``) passes; ``1.2e-7`` vs ``1.3e-7``, ``0.5000004`` vs ``0.5``
and ``1000000.01`` vs ``1000000`` do not."""

class MathVerifier:
    """Verifier for ``kind == "math"`` tasks; gold in ``task.gold["answer"]``.

    timeout_s: hard wall-clock limit of one math-verify call (the worker is killed past it);
    memory_mb: address-space cap of the worker; max_completion_chars: longer completions are ``format``;
    max_answer_chars: a longer final answer is ``wrong``; max_candidates: more different final
    answers than this are a hedge without further checking; fast_path: exact in-process comparison
    when gold and answer are plain numbers; startup_timeout_s: how long the worker may take to start;
    max_digits: an answer holding a number with more digits than this (estimated without computing
    it, e.g. ``9^{9^{9^9}}``) is ``wrong`` unless the gold is as large -- the guard against sympy bombs
    that would block inside C code (those still die at the hard limit when the guard is raised);
    rel_tol: relative tolerance when either side is written with a decimal point (:data:`REL_TOL`,
    at most 1e-4), the same on the fast path and in the math-verify worker; exact values compare exactly.
    """

    name = "math"

    def __init__(self, timeout_s: float = 5.0, memory_mb: int = 2048, max_completion_chars: int = 100_000,
                 max_answer_chars: int = 1000, max_candidates: int = 4, fast_path: bool = True,
                 startup_timeout_s: float = 60.0, max_digits: float = 10_000, rel_tol: float = REL_TOL) -> None:
        if not 0 <= rel_tol <= 1e-4:
            raise ValueError(f"rel_tol must be in [0, 1e-4] (1.2e-7 and 1.3e-7 must stay different), got {rel_tol}")
        self.rel_tol = float(rel_tol)
        self.timeout_s = float(timeout_s)
        self.memory_mb = int(memory_mb)
        self.max_completion_chars = int(max_completion_chars)
        self.max_answer_chars = int(max_answer_chars)
        self.max_candidates = int(max_candidates)
        self.fast_path = bool(fast_path)
        self.startup_timeout_s = float(startup_timeout_s)
        self.max_digits = float(max_digits)
        self.worker_path = WORKER_PATH
        self._worker: _MathWorker | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_worker"] = None
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @staticmethod
    def check_task(task: Task) -> str | None:
        """Why no completion of ``task`` could be judged (None when one can): its gold ``answer`` is missing,
        blank, or holds nothing the answer parser reads."""
        if "answer" not in task.gold:
            return "missing field 'answer': a math task needs its gold final answer"
        text = _gold_text(task.gold["answer"])
        if not text or not parse_answer(text).items:
            return f"field 'answer' is {task.gold['answer']!r}: no final answer the math verifier can compare with"
        return None

    def verify(self, task: Task, completion: str) -> Verdict:
        t0 = time.perf_counter()
        outcome, details = self._judge(task, completion)
        return Verdict(1.0 if outcome == "pass" else 0.0, outcome == "pass", outcome, details,
                       time.perf_counter() - t0)

    def _judge(self, task: Task, completion: str) -> tuple[str, dict[str, Any]]:
        if "answer" not in task.gold:
            return "infra", {"error": f"task {task.id!r} has no gold answer (gold['answer'])"}
        if not isinstance(completion, str):
            return "format", {"reason": f"completion is {type(completion).__name__}, not text"}
        if len(completion) > self.max_completion_chars:
            return "format", {"reason": f"too long: {len(completion)} chars > {self.max_completion_chars}"}
        ext = extract_answer(completion, task.answer_format or "boxed", max_answer_chars=self.max_answer_chars)
        if not ext.found:
            return "format", {"reason": f"no {ext.fmt} answer" + (f" ({ext.note})" if ext.note else "")}
        cands = ext.candidates
        details: dict[str, Any] = {"answer": ext.answer[:200], "candidates": len(cands)}
        if len(cands) > self.max_candidates or ext.note == "too many":
            return "wrong", {**details, "reason": f"hedge: {len(cands)} different final answers"}
        if any(len(c) > self.max_answer_chars for c in cands):
            return "wrong", {**details, "reason": f"answer longer than {self.max_answer_chars} chars"}
        gold = parse_answer(_gold_text(task.gold["answer"]))
        todo = plan(gold, [parse_answer(c) for c in cands])
        eq: list[bool | None] = [None if not self.fast_path else fast_equal(g, c, self.rel_tol)
                                 if isinstance(g, Item) and isinstance(c, Item) else None for g, c in todo.pairs]
        path, worker_why = "fast", ""
        rest = [i for i, e in enumerate(eq) if e is None]
        if rest and todo.verdict is None:
            res = self._call_worker([[todo.pairs[i][0].wire(), todo.pairs[i][1].wire()] for i in rest])
            if res["outcome"] != "pass":
                return res["outcome"], {**details, "path": "math_verify", "reason": res.get("reason", "")}
            for i, ok in zip(rest, res["eq"]):
                eq[i] = bool(ok)
            path = "math_verify"
            worker_why = next((r for r in res.get("reasons", []) if r.startswith(("hedge", "answer "))), "")
        ok, why = todo.decide([bool(e) for e in eq])
        if not ok and path == "math_verify" and worker_why:
            why = worker_why
        elif not ok and not why.startswith("hedge") and len(cands) > 1 and len(gold.items) == 1:
            why = f"hedge: {len(cands)} different final answers"
        return ("pass" if ok else "wrong"), {**details, "path": path, "reason": why}

    def _call_worker(self, pairs: list[list[dict]]) -> dict[str, Any]:
        with self._lock:
            if self._worker is None or not self._worker.alive():
                try:
                    self._worker = _MathWorker(self.worker_path, self.memory_mb, self.startup_timeout_s)
                except OSError as e:
                    return {"outcome": "infra", "reason": f"math worker failed to start: {e}"}
            worker = self._worker
            soft = max(0.05, self.timeout_s * 0.75)
            req = {"pairs": pairs, "soft_s": soft, "max_digits": self.max_digits, "rel_tol": self.rel_tol}
            res = worker.call(req, self.timeout_s)
            if res["outcome"] in ("timeout", "infra") and not worker.alive():
                self._worker = None
            return res

    def close(self) -> None:
        """Stop the worker process (a later call starts a new one)."""
        with self._lock:
            if self._worker is not None:
                self._worker.kill()
                self._worker = None


def _gold_text(gold: Any) -> str:
    s = str(gold).strip()
    ext = extract_answer(s, "boxed")  # a gold written as "\boxed{...}" or "$...$"
    return ext.answer if ext.found and ext.answer is not None else s.strip("$ ")


_LIVE: weakref.WeakSet[_MathWorker] = weakref.WeakSet()


@atexit.register
def _kill_all() -> None:
    for w in list(_LIVE):
        w.kill()


class _MathWorker:
    """A persistent ``_math_worker.py`` child: JSON lines over pipes, killed at the hard limit."""

    def __init__(self, path: str, memory_mb: int, startup_timeout_s: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", path, "--memory-mb", str(memory_mb), "--parent", str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
        self._buf = b""
        _LIVE.add(self)
        weakref.finalize(self, _kill_proc, self.proc)
        try:
            line = self._read_line(time.monotonic() + startup_timeout_s)
        except EOFError:
            self.kill()
            raise OSError("math worker exited while starting (is math-verify installed? "
                          "`pip install math-verify`)") from None
        if line is None or b"ready" not in line:
            self.kill()
            raise OSError(f"math worker did not start within {startup_timeout_s:.0f}s"
                          if line is None else f"math worker said {line[:200]!r}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        _kill_proc(self.proc)

    def call(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one request; on the hard limit kill the worker and answer ``timeout``."""
        deadline = time.monotonic() + timeout_s
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
            line = self._read_line(deadline)
        except (BrokenPipeError, EOFError, OSError) as e:
            self.kill()
            return {"outcome": "infra", "reason": f"math worker died ({type(e).__name__})"}
        if line is None:
            self.kill()
            return {"outcome": "timeout", "reason": f"hard time limit {timeout_s:g}s (worker killed)"}
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or reply.get("outcome") not in ("pass", "wrong", "timeout", "infra"):
            self.kill()
            return {"outcome": "infra", "reason": "math worker sent a malformed reply"}
        return reply

    def _read_line(self, deadline: float) -> bytes | None:
        """One line from the worker, None at the deadline; EOFError when it died."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError("math worker closed its output")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line


def _kill_proc(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            proc.kill()
        except OSError:
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not wait on the process
        pass
    for f in (proc.stdin, proc.stdout):
        try:
            if f is not None:
                f.close()
        except OSError:
            pass
