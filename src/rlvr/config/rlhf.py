"""Classic RLHF: a Bradley-Terry reward model, then PPO against it (or against a verifier)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rlvr.config.base import Section
from rlvr.config.data import BuiltinArithmetic, TaskSource
from rlvr.config.health import HealthConfig
from rlvr.config.limits import BatchSize, micro_batch_divides
from rlvr.config.optim import OptimConfig
from rlvr.config.preference import PairBuilder, PairsFile
from rlvr.config.rl import SamplingConfig


class RewardModelStage(Section):
    """Train a scalar reward head on preference pairs (Bradley-Terry)."""

    type: Literal["reward_model"] = "reward_model"
    name: str = "reward_model"
    """Stage name (its run sub-directory)."""
    pairs: PairBuilder | PairsFile = PairBuilder()
    """Where the pairs come from."""
    backbone: str | None = None
    """Start the reward model from this checkpoint (local HF folder, same tokenizer) instead of the policy; pairs are still sampled from the policy."""
    optim: OptimConfig = OptimConfig(lr=1e-4, warmup_steps=5)
    """Optimiser and schedule."""
    epochs: int = Field(2, ge=1)
    """Passes over the pairs."""
    batch_size: BatchSize = Field(32)
    """Pairs per optimizer step."""
    margin: float = 0.0
    """Margin in the BT loss."""
    center_coef: float = 0.0
    """Penalty on mean squared reward (keeps rewards centred)."""
    max_steps: int | None = Field(None, ge=1)
    """Stop after N optimizer steps (None: epochs decide)."""
    micro_batch_size: BatchSize = Field(32)
    """Pairs per forward (chosen+rejected concatenated)."""
    _micro_batch_divides = field_validator("micro_batch_size")(micro_batch_divides)
    max_length: int = Field(256, ge=2)
    """Truncate prompt+response to this many tokens."""
    save_every: int = Field(0, ge=0)
    """Checkpoint every N steps (0: end only)."""
    keep_last: int = Field(2, ge=0)
    """Keep this many step checkpoints."""


class PPOKL(Section):
    """The KL penalty in PPO's per-token reward, with an adaptive coefficient (Ziegler et al. 2019)."""

    beta: float = Field(0.05, ge=0)
    """Initial KL coefficient β (the penalty is -β · (log π - log π_ref) per token)."""
    target: float | None = 6.0
    """Target KL (nats per sequence) for the adaptive controller (None: β stays fixed)."""
    horizon: int = 10000
    """Adaptive controller horizon."""


class PPOStage(Section):
    """PPO with a value head, GAE, clipped policy/value losses and an adaptive KL penalty in the reward.

    Field names follow the RL stage's (``eps``, ``tasks_per_step``, ``kl.beta``, ``sampling``); its rollout
    is the GRPO family's collector with one sample per task (``sampling.group_size`` = 1)."""

    type: Literal["ppo"] = "ppo"
    name: str = "ppo"
    """Stage name (its run sub-directory)."""
    data: TaskSource = BuiltinArithmetic(families=["add3"], n=5000)
    """Prompts."""
    reward: Literal["reward_model", "verifier"] = "verifier"
    """Reward source: the trained reward model or the task's verifier."""
    reward_model_path: str | None = None
    """Path of the reward model (defaults to the pipeline's reward_model stage output)."""
    gamma: float = 1.0
    """GAE discount γ."""
    lam: float = 0.95
    """GAE λ."""
    eps: float = 0.2
    """Policy ratio clip ε."""
    value_clip: float = 0.2
    """Value clip."""
    vf_coef: float = 0.5
    """Value loss weight."""
    kl: PPOKL = PPOKL()
    """KL penalty in the reward and its adaptive controller."""
    whiten_advantages: bool = True
    """Whiten advantages per batch."""
    optim: OptimConfig = OptimConfig(lr=1e-4, warmup_steps=5, schedule="constant")
    """Optimiser."""
    max_steps: int = Field(30, ge=1)
    """PPO steps (rollout batches)."""
    tasks_per_step: int = Field(32, ge=1)
    """Tasks (prompts) per rollout batch."""
    ppo_epochs: int = Field(2, ge=1)
    """Epochs over each rollout batch."""
    mini_batches: int = Field(2, ge=1)
    """Mini-batches per epoch."""
    sampling: SamplingConfig = SamplingConfig(group_size=1)
    """Rollout generation (one sample per task: ``group_size`` must be 1)."""
    micro_batch_size: int = Field(32, ge=1)
    """Sequences per forward pass inside a mini-batch (exact token-mean accumulation)."""
    critic_optim: OptimConfig | None = None
    """Critic optimiser (None: same as ``optim``)."""
    verifier_workers: int = Field(0, ge=0)
    """Verifier worker processes (0 = inline)."""
    max_infra_frac: float = Field(0.5, ge=0, le=1)
    """Pause the run (stop with a message, keeping the last checkpoint) when more than this fraction of a
    step's verifications are ``infra`` (the verifier raised, hung or crashed): training on such a batch
    would learn from noise. ``infra`` rollouts below it are kept out of the advantages and counted."""
    save_every: int = Field(0, ge=0)
    """Checkpoint every N steps (0: end only)."""
    keep_last: int = Field(2, ge=0)
    """Keep this many step checkpoints."""
    eval_every: int = Field(0, ge=0)
    """Held-out greedy pass@1 every N steps (0: only the pipeline's after-stage eval)."""
    health: HealthConfig = HealthConfig()
    """Training-health rules (NaN, KL drift, entropy collapse), the same monitor as every policy stage."""

    @field_validator("sampling")
    @classmethod
    def _one_sample(cls, v: SamplingConfig) -> SamplingConfig:
        if v.group_size != 1:
            raise ValueError(f"PPO samples one completion per task: sampling.group_size must be 1, got {v.group_size}")
        if v.dynamic_sampling not in (None, "off"):
            raise ValueError("sampling.dynamic_sampling compares the samples of a group; PPO samples one per task")
        return v
