"""Supervised fine-tuning on demonstrations."""

from __future__ import annotations

from typing import Literal

from rlvr.config.base import Section
from rlvr.config.data import BuiltinArithmetic, TaskSource
from rlvr.config.optim import OptimConfig


class SFTStage(Section):
    """Completion-only SFT on the tasks' worked solutions (``Task.solution``)."""

    type: Literal["sft"] = "sft"
    name: str = "sft"
    """Stage name (its run sub-directory)."""
    data: TaskSource = BuiltinArithmetic()
    """Demonstrations: tasks with a ``solution``."""
    optim: OptimConfig = OptimConfig()
    """Optimiser and schedule."""
    max_steps: int = 1000
    """Optimizer steps."""
    max_minutes: float | None = None
    """Stop early after this much training wall time."""
    batch_size: int = 64
    """Sequences per optimizer step."""
    micro_batch_size: int = 64
    """Sequences per forward pass (accumulation = batch_size / micro_batch_size)."""
    max_length: int = 256
    """Truncate prompt+completion to this many tokens."""
    bucketing: bool = True
    """Group sequences of similar length in a micro-batch to cut padding."""
    save_every: int = 200
    """Write a checkpoint every N steps (0: only at the end)."""
    keep_last: int = 2
    """Keep this many step checkpoints."""
    eval_every: int = 0
    """Held-out eval every N steps for the learning curve (0: only at the end)."""
    log_every: int = 10
    """Write metrics every N steps."""
