"""Metrics: append-only ``metrics.jsonl`` (flushed each write), plus the sinks the stage's ``logging``
section turns on (TensorBoard, W&B: :mod:`rlvr.monitoring.sinks`)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any


class MetricsWriter:
    """Appends one JSON object per call to ``path``; never rewrites what is already there."""

    def __init__(self, path: str | Path, tensorboard_dir: str | Path | None = None):
        from rlvr.monitoring.sinks import TensorBoardSink, open_sinks

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", encoding="utf-8")
        self._own = [TensorBoardSink(Path(tensorboard_dir))] if tensorboard_dir is not None else []
        self._sinks = self._own + open_sinks()  # the running stage's logging section (closed with the stage)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        rec = {"step": step, "time": round(time.time(), 3)}
        rec.update({k: _clean(v) for k, v in metrics.items()})
        self._f.write(json.dumps(rec) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        for s in self._sinks:
            s.log(step, rec)

    def close(self) -> None:
        self._f.close()
        for s in self._own:
            s.close()


def _clean(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return str(v)
    return v


def read_metrics(path: str | Path, after_step: int | None = None) -> list[dict[str, Any]]:
    """Read a metrics file; a torn last line (killed mid-write) is skipped."""
    out = []
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if after_step is None or rec.get("step", 0) <= after_step:
            out.append(rec)
    return out


def truncate_metrics_after(path: str | Path, step: int) -> None:
    """On resume, drop records logged after the checkpoint's step (they will be logged again)."""
    from rlvr.data.jsonl import write_jsonl_atomic

    p = Path(path)
    if p.exists():
        write_jsonl_atomic(p, read_metrics(p, after_step=step))


class PhaseTimer:
    """Wall seconds of a step's named phases: ``with phase("ref"): ...`` -> ``{"time/ref": s}`` (the RL and PPO
    steps: ``time/rollout``, ``time/advantages``, ``time/ref``, ``time/train``)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def metrics(self) -> dict[str, float]:
        return {f"time/{k}": v for k, v in self.seconds.items()}
