"""On-policy distillation: the student samples, a teacher scores every token of those samples."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import Section
from rlvr.config.data import BuiltinArithmetic, TaskSource
from rlvr.config.optim import OptimConfig
from rlvr.config.rl import SamplingConfig


class OnPolicyDistillStage(Section):
    """On-policy distillation (Agarwal et al. 2024 GKD; Thinking Machines 2025): minimise the reverse KL
    ``KL(π_θ || π_T)`` to a teacher on the student's own samples, summed over the vocabulary at every
    completion token (``rlvr.losses.reverse_kl``). No verifier in the loss; the verifier's pass rate is logged."""

    type: Literal["onpolicy_distill"] = "onpolicy_distill"
    name: str = "onpolicy_distill"
    """Stage name (its run sub-directory)."""
    teacher: str
    """The teacher: a local HF model folder sharing the student's tokenizer."""
    data: TaskSource = BuiltinArithmetic(families=["add3"], n=5000)
    """Prompts (the gold answers only feed the logged pass rate)."""
    sampling: SamplingConfig = SamplingConfig(group_size=4)
    """Student sampling (group_size samples per prompt)."""
    optim: OptimConfig = OptimConfig(lr=1e-4, warmup_steps=5, schedule="constant")
    """Optimiser and schedule."""
    max_steps: int = Field(200, ge=1)
    """Steps (one batch of student samples each)."""
    max_minutes: float | None = None
    """Stop early after this much wall time; a cap that cuts the stage is printed and logged (event ``time_cap``)."""
    tasks_per_step: int = Field(16, ge=1)
    """Prompts per step."""
    micro_batch_size: int = Field(64, ge=1)
    """Sequences per forward/backward."""
    save_every: int = Field(50, ge=0)
    """Write a checkpoint every N steps (0: only at the end)."""
    keep_last: int = Field(2, ge=0)
    """Keep this many step checkpoints."""
    eval_every: int = Field(0, ge=0)
    """Held-out eval every N steps (0: only at the end)."""
