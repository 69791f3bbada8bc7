"""Classic RLHF: a Bradley-Terry reward model, then PPO against it (or against a verifier)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import Section
from rlvr.config.data import BuiltinArithmetic, TaskSource
from rlvr.config.optim import OptimConfig
from rlvr.config.preference import PairBuilder, PairsFile


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
    batch_size: int = Field(32, ge=1)
    """Pairs per optimizer step."""
    margin: float = 0.0
    """Margin in the BT loss."""
    center_coef: float = 0.0
    """Penalty on mean squared reward (keeps rewards centred)."""
    max_steps: int | None = Field(None, ge=1)
    """Stop after N optimizer steps (None: epochs decide)."""
    micro_batch_size: int = Field(32, ge=1)
    """Pairs per forward (chosen+rejected concatenated)."""
    max_length: int = Field(256, ge=2)
    """Truncate prompt+response to this many tokens."""
    save_every: int = Field(0, ge=0)
    """Checkpoint every N steps (0: end only)."""
    keep_last: int = Field(2, ge=0)
    """Keep this many step checkpoints."""


class PPOStage(Section):
    """PPO with a value head, GAE, clipped policy/value losses and an adaptive KL penalty in the reward."""

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
    clip_eps: float = 0.2
    """Policy ratio clip."""
    value_clip: float = 0.2
    """Value clip."""
    vf_coef: float = 0.5
    """Value loss weight."""
    init_kl_coef: float = 0.05
    """Initial KL coefficient."""
    target_kl: float | None = 6.0
    """Target KL for the adaptive controller (None: fixed coefficient)."""
    kl_horizon: int = 10000
    """Adaptive KL controller horizon."""
    whiten_advantages: bool = True
    """Whiten advantages per batch."""
    optim: OptimConfig = OptimConfig(lr=1e-4, warmup_steps=5, schedule="constant")
    """Optimiser."""
    max_steps: int = Field(30, ge=1)
    """PPO steps (rollout batches)."""
    prompts_per_step: int = Field(32, ge=1)
    """Prompts per rollout batch."""
    ppo_epochs: int = Field(2, ge=1)
    """Epochs over each rollout batch."""
    mini_batches: int = Field(2, ge=1)
    """Mini-batches per epoch."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature."""
    max_new_tokens: int = Field(64, ge=1)
    """Generation budget."""
    micro_batch_size: int = Field(32, ge=1)
    """Sequences per forward pass inside a mini-batch (exact token-mean accumulation)."""
    critic_optim: OptimConfig | None = None
    """Critic optimiser (None: same as ``optim``)."""
    verifier_workers: int = Field(0, ge=0)
    """Verifier worker processes (0 = inline)."""
    save_every: int = Field(0, ge=0)
    """Checkpoint every N steps (0: end only)."""
    keep_last: int = Field(2, ge=0)
    """Keep this many step checkpoints."""
    eval_every: int = Field(0, ge=0)
    """Held-out greedy pass@1 every N steps (0: only the pipeline's after-stage eval)."""
