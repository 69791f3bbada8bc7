"""The faults the stage lifecycle guards against, written once for every stage (``trainers/common.py``
calls these): non-finite numbers, stop signals, and a checkpoint that is not what was written.

* **Non-finite loss or gradient**: :func:`guarded_step` skips the optimizer update (gradients dropped,
  the weights and AdamW moments untouched; the schedule still advances so the step count stays the
  schedule's); the lifecycle logs a ``nonfinite`` event naming the batch's task ids, and after
  ``optim.max_nonfinite_steps`` such steps in a row stops the stage with :class:`NonFiniteError`, keeping
  the last good checkpoint. A NaN never reaches a checkpoint (``models.checkpoint`` refuses such weights).
* **SIGINT / SIGTERM**: :class:`SignalLatch` turns the first signal into a request; the lifecycle writes a
  checkpoint at the next step boundary and raises :class:`~rlvr.errors.Interrupted` (the CLI prints the
  resume command and exits 130). A second signal stops at once (``KeyboardInterrupt``).
* **Failing verifier or reward**: every ``infra`` verdict's error (type, message, the user's file:line and
  traceback, with the task id and the completion) is appended to the stage's ``reward_errors.jsonl`` (the
  first :data:`MAX_REWARD_ERRORS` of the stage); when a step has more than ``max_infra_frac`` of them the
  stage pauses with :func:`infra_pause_message`, which names the first failure and the ``rlvr verify``
  command that reproduces it from that file.
* **Corrupt checkpoint**: :func:`checked_latest` verifies the latest checkpoint's manifest and, when it does
  not match, refuses naming the file and offering the previous one.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
import warnings
from pathlib import Path

import torch

from rlvr.errors import RlvrError
from rlvr.models.checkpoint import CheckpointError, list_checkpoints, verify_checkpoint

NONFINITE_KEYS = ("train/loss", "train/grad_norm", "critic/grad_norm")


class NonFiniteError(RlvrError):
    """Too many steps in a row had a non-finite loss or gradient: the stage stopped."""


def grads_finite(*models) -> bool:
    """Every gradient of every model is finite (no NaN/inf)."""
    for m in models:
        for p in m.parameters():
            if p.grad is not None and not bool(torch.isfinite(p.grad).all()):
                return False
    return True


def skip_update(opts, sched=None) -> None:
    """Drop the gradients of a non-finite step: no optimizer step (weights and moments untouched)."""
    for opt in opts:
        opt.zero_grad(set_to_none=True)
    if sched is not None:
        with warnings.catch_warnings():  # "scheduler before optimizer": the skipped step is deliberate
            warnings.simplefilter("ignore", UserWarning)
            sched.step()


def is_nonfinite(rec: dict) -> bool:
    """This step's record says its update was skipped for a non-finite loss or gradient."""
    if rec.get("train/nonfinite_skipped", 0):
        return True
    return any(isinstance(rec.get(k), float) and not math.isfinite(rec[k]) for k in NONFINITE_KEYS)


def nonfinite_message(name: str, streak: list[dict], kept: Path | None) -> str:
    first, last = streak[0]["step"], streak[-1]["step"]
    ids = ", ".join(map(str, streak[-1]["task_ids"][:8])) or "(not recorded)"
    keep = f"the last good checkpoint is {kept}" if kept else "no checkpoint was written yet"
    return (f"stage {name}: {len(streak)} steps in a row ({first}..{last}) had a non-finite loss or gradient; "
            f"their updates were skipped (task ids of the last: {ids}) and the stage stopped (optim."
            f"max_nonfinite_steps: {len(streak)}). The weights are those of the last finite update; {keep}. "
            "Lower optim.lr, set optim.max_grad_norm, or look at those tasks, then resume with --resume")


class VerifierStormError(RlvrError):
    """More than ``max_infra_frac`` of a step's verifications were infra: the run paused."""


REWARD_ERRORS_FILE = "reward_errors.jsonl"
MAX_REWARD_ERRORS = 20  # failures kept per stage (append-only, across resumes)


def record_reward_errors(out: Path, step: int, errors: list[dict]) -> Path | None:
    """Append ``errors`` (one dict per infra verdict: task_id, completion, error, where, traceback) to
    ``out/reward_errors.jsonl`` until the stage holds :data:`MAX_REWARD_ERRORS`; returns the file (None when
    nothing was ever written)."""
    path = out / REWARD_ERRORS_FILE
    have = sum(1 for _ in path.open(encoding="utf-8")) if path.exists() else 0
    if errors and have < MAX_REWARD_ERRORS:
        out.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            for e in errors[: MAX_REWARD_ERRORS - have]:
                f.write(json.dumps({"step": step, **e}, default=str) + "\n")
    return path if path.exists() else None


def reproduce_command(cfg, errors_file: Path | None) -> str:
    """The ``rlvr verify`` command that judges the recorded failures again with the stage's rewards."""
    data = getattr(getattr(cfg, "data", None), "path", None) or "<the stage's tasks as JSONL>"
    terms = getattr(cfg, "rewards", None) or []
    rewards = "".join(f" --reward {t.function}" if t.name == "python" else " --reward correct"
                      for t in terms if t.name in ("python", "correct"))
    return (f"rlvr verify --tasks {data} --completions {errors_file or '<completions JSONL>'}{rewards} "
            "--details --out verdicts.jsonl")


def infra_pause_message(cfg, step: int, n: int, total: int, outcomes: dict, kept: Path | None,
                        errors: list[dict], errors_file: Path | None) -> str:
    """Why the stage paused: the counts, the first failure in the user's terms, where the failures are and
    how to reproduce them."""
    limit = getattr(cfg, "max_infra_frac", 1.0)
    first = errors[0] if errors else {}
    why = (f" The first failure (task {first.get('task_id')!r}): {first.get('error', 'no error recorded')}."
           if errors else "")
    where = (f" The failures, with tracebacks and completions, are in {errors_file}; reproduce them with "
             f"'{reproduce_command(cfg, errors_file)}'." if errors_file else "")
    return (f"stage {cfg.name}, step {step}: {n} of {total} verifications were infra ({n / total:.0%} > "
            f"max_infra_frac {limit}; outcomes {outcomes}): the verifier or a reward function is failing "
            f"(raising, hanging, returning a non-number or crashing), so the run paused instead of training on "
            f"this batch.{why}{where} "
            + (f"The last checkpoint is {kept}; " if kept else "No checkpoint was written yet; ")
            + "fix the reward or the verifier, then resume with --resume")


class SignalLatch:
    """SIGINT/SIGTERM -> a stop request honoured at the next step boundary (main thread only)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, object] = {}

    def install(self) -> SignalLatch:
        if threading.current_thread() is not threading.main_thread():
            return self
        for s in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[s] = signal.signal(s, self._handle)
            except (ValueError, OSError):
                pass
        return self

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:  # the second signal: stop now
            self.restore()
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}")
        self.signum = signum
        print(f"\nreceived {signal.Signals(signum).name}: a checkpoint is written at the end of this step, then "
              "the run stops (send it again to stop at once)", file=sys.stderr, flush=True)

    def restore(self) -> None:
        for s, h in self._old.items():
            try:
                signal.signal(s, h)
            except (ValueError, OSError, TypeError):
                pass
        self._old = {}


def checked_latest(root: Path) -> Path | None:
    """The latest step checkpoint under ``root``, verified against its manifest; a corrupt one is refused,
    naming the damaged file and offering the previous checkpoint."""
    cks = list_checkpoints(root)
    if not cks:
        return None
    try:
        verify_checkpoint(cks[-1])
    except CheckpointError as e:
        prev = next((c for c in reversed(cks[:-1]) if _ok(c)), None)
        offer = (f"the previous checkpoint {prev} is intact: move {cks[-1]} aside (e.g. mv {cks[-1]} "
                 f"{cks[-1].parent / ('.bad-' + cks[-1].name)}) and resume again to continue from it"
                 if prev is not None else "no earlier intact checkpoint exists: rerun the stage without --resume")
        raise CheckpointError(f"refusing to resume from {cks[-1]}: {e}. {offer}") from None
    return cks[-1]


def _ok(path: Path) -> bool:
    try:
        verify_checkpoint(path)
        return True
    except CheckpointError:
        return False
