"""Held-out evaluation: greedy pass@1 and sampled pass@k with the task's verifier."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rlvr.config.agent import AgentLoopConfig
from rlvr.config.base import Section
from rlvr.config.data import BuiltinArithmetic, TaskSource
from rlvr.config.rl import RewardTerm
from rlvr.config.limits import BatchSize, NewTokens, Samples, Temperature, Workers


class EvalConfig(Section):
    """Held-out evaluation run after each stage (and during training every ``every`` steps)."""

    tasks: TaskSource = BuiltinArithmetic(families=["add2"], n=200, split="heldout", seed=1234)
    """Held-out tasks (must not overlap the training split)."""
    k: Samples = 1
    """Samples per task for pass@k (1 = greedy only)."""
    temperature: Temperature = 1.0
    """Sampling temperature for the k samples (greedy pass@1 is always computed)."""
    max_new_tokens: NewTokens = 64
    """Generation budget per completion."""
    calibration_samples: int = Field(4, ge=0, le=64)
    """Samples per held-out problem drawn (at ``temperature``) for the agreement measure of calibration, in
    the evaluation after each stage (the ``k`` samples are used instead when ``k`` > 1; 0: no agreement
    measure, the answer-probability one is always computed). docs/evaluation.md, "Calibration"."""
    calibration_bins: int = Field(10, ge=1, le=100)
    """Equal-width confidence bins of the expected calibration error."""
    batch_size: BatchSize = 256
    """Prompts per generation batch."""
    workers: Workers = 0
    """Verifier worker processes (0 = inline; arithmetic needs none)."""
    overlap: Literal["error", "warn"] = "error"
    """Evaluation tasks whose prompt also appears in a stage's training tasks (by content hash): refuse the run, or warn with the count."""
    rewards: list[RewardTerm] | None = None
    """Score held-out completions with these reward terms (as an RL stage's ``rewards``): a pass is a summed reward of 1 or more. None: each task's verifier; but when the recipe has an RL stage with a python reward and an evaluation task has no verifier or lacks its gold payload (a math task without ``answer``), that stage's rewards."""
    agent: AgentLoopConfig = AgentLoopConfig()
    """Closed-loop limits for environment tasks (``kind: env``), evaluated turn by turn."""
    control: Literal["sft", "none"] = "none"
    """The equal-time SFT control: ``sft`` continues the last SFT stage before the later stages on its own demonstrations for each later stage's training seconds and evaluates it at each boundary (rows ``sft-control@STAGE``, docs/evaluation.md); ``none``: no control."""

    @field_validator("tasks")
    @classmethod
    def _heldout_only(cls, v):
        if getattr(v, "type", "") in ("builtin", "builtin_env") and v.split != "heldout":
            raise ValueError("built-in evaluation tasks must use split: heldout (never the training split)")
        return v
