"""Where a run's metrics go besides ``metrics.jsonl``: plain log lines, TensorBoard, W&B, sample completions."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import Section


class WandbConfig(Section):
    """Weights & Biases (the ``wandb`` package). ``mode: offline`` writes runs under ``<stage>/wandb`` for ``wandb sync``."""

    project: str = "rlvr"
    """W&B project."""
    entity: str | None = None
    """W&B entity (team or user); None: your default."""
    mode: Literal["offline", "online", "disabled"] = "offline"
    """offline: write locally only (nothing leaves the machine); online: stream to the server."""
    tags: list[str] = []
    """Run tags."""


class LoggingConfig(Section):
    """Metric sinks and console output of every stage."""

    every: int = Field(10, ge=1)
    """A plain log line every N steps when stdout is not a terminal (a progress bar otherwise)."""
    tensorboard: bool = False
    """Also write TensorBoard event files under ``<stage>/tensorboard`` (text metrics as text summaries)."""
    wandb: WandbConfig | None = None
    """Also log to Weights & Biases (None: off)."""
    samples_every: int = Field(10, ge=0)
    """RL stages: write sample completions with their verdicts to ``<stage>/samples.jsonl`` at the first step and every N steps (0: never)."""
    samples: int = Field(4, ge=1)
    """How many completions each time (the first of as many groups)."""
