"""Optimiser, schedule and batching shared by every trainer."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import Section


class OptimConfig(Section):
    """AdamW with warmup and a decay schedule, gradient clipping and accumulation."""

    lr: float = Field(1e-3, ge=0)
    """Peak learning rate (0 freezes the weights: a diagnostic run)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas."""
    warmup_steps: int = Field(20, ge=0)
    """Linear warmup steps."""
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    """Decay after warmup (to ``min_lr_ratio`` × lr at the last step)."""
    min_lr_ratio: float = 0.1
    """Final learning rate as a fraction of the peak."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm (0 disables)."""
    max_nonfinite_steps: int = Field(3, ge=1)
    """A step whose loss or gradient is NaN/inf skips its update (logged with the batch's task ids); this
    many such steps in a row stop the stage, keeping the last good checkpoint."""
