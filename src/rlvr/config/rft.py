"""Rejection-sampling fine-tuning (``rft``, expert iteration) and off-policy distillation (``distill``).

Both are SFT on verified samples: each round draws ``tasks_per_round`` tasks, samples
``sampling.group_size`` completions per task (from the policy itself, or from a teacher checkpoint),
keeps those the verifier passes (deduplicated per task, optionally only the shortest), and trains
``steps_per_round`` SFT steps on them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rlvr.config.base import Section
from rlvr.config.data import BuiltinArithmetic, TaskSource
from rlvr.config.optim import OptimConfig


class RejectionSampling(Section):
    """How the candidates of a round are sampled."""

    group_size: int = Field(8, ge=1)
    """K: samples per task."""
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature (0: greedy, one distinct sample per task)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling threshold."""
    max_new_tokens: int = Field(64, ge=1)
    """Generation budget per completion (a completion cut by it is never kept)."""
    stop: list[str] = []
    """Extra stop strings."""
    row_seeds: bool = False
    """Seed each sample by (round seed, row index) instead of one stream per batch."""


class SampleSFTBase(Section):
    """What RFT and distillation share: rounds of sample -> verify -> filter -> SFT."""

    data: TaskSource = BuiltinArithmetic(families=["add3"], n=5000)
    """Tasks to sample on (prompts + hidden gold; no demonstrations needed)."""
    sampling: RejectionSampling = RejectionSampling()
    """Candidate sampling."""
    keep: Literal["all", "shortest"] = "all"
    """Of a task's distinct verified completions keep all, or only the shortest (fewest tokens)."""
    max_per_task: int | None = Field(None, ge=1)
    """Keep at most this many distinct verified completions per task (shortest first; None: no cap)."""
    rounds: int = Field(4, ge=1)
    """N: rounds of sample -> filter -> SFT (expert iteration)."""
    tasks_per_round: int = Field(256, ge=1)
    """Tasks sampled each round (fresh ones, in the data's seeded order)."""
    steps_per_round: int = Field(20, ge=1)
    """SFT optimizer steps on each round's kept samples."""
    batch_size: int = Field(64, ge=1)
    """Sequences per SFT step."""
    micro_batch_size: int = Field(64, ge=1)
    """Sequences per forward pass."""
    max_length: int = Field(256, ge=2)
    """Truncate prompt+completion to this many tokens."""
    bucketing: bool = True
    """Group sequences of similar length in a micro-batch."""
    packing: bool = False
    """Pack several kept samples into one row no longer than the step's longest (as ``sft.packing``: attention
    within each sample, same loss and gradient; off by default, see there)."""
    optim: OptimConfig = OptimConfig(lr=1e-4, warmup_steps=5, schedule="constant")
    """Optimiser and schedule (over all rounds' steps)."""
    max_minutes: float | None = None
    """Stop early after this much training wall time (sampling included); a cap that cuts the stage is printed and logged (event ``time_cap``)."""
    save_every: int = Field(0, ge=0)
    """Write a checkpoint every N steps (0: only at the end); a checkpoint holds the round's kept samples."""
    keep_last: int = Field(2, ge=0)
    """Keep this many step checkpoints."""
    eval_every: int = Field(0, ge=0)
    """Held-out eval every N steps (0: only at the end)."""
    log_every: int = Field(1, ge=1)
    """Write metrics every N steps."""
    verifier_workers: int = Field(0, ge=0)
    """Verifier worker processes (0 = inline)."""

    @property
    def max_steps(self) -> int:
        """All rounds' SFT steps."""
        return self.rounds * self.steps_per_round


class RFTStage(SampleSFTBase):
    """Rejection-sampling fine-tuning / expert iteration: the policy samples, the verifier filters, the
    policy is fine-tuned on its own verified samples; repeated ``rounds`` times."""

    type: Literal["rft"] = "rft"
    name: str = "rft"
    """Stage name (its run sub-directory)."""


class DistillStage(SampleSFTBase):
    """Off-policy distillation: a teacher checkpoint samples, the verifier filters, the policy is
    fine-tuned on the teacher's verified samples (the teacher's tokenizer must be the policy's)."""

    type: Literal["distill"] = "distill"
    name: str = "distill"
    """Stage name (its run sub-directory)."""
    teacher: str = Field(..., min_length=1)
    """Local folder of the teacher: an HF causal LM + tokenizer (e.g. a larger tiny model's ``final/``)."""

    @field_validator("teacher")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("teacher must be a local checkpoint folder")
        return v
