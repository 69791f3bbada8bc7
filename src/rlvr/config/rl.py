"""RL with verifiable rewards: the GRPO family. Each algorithm variant is a typed alternative."""

from __future__ import annotations

from typing import Literal

from rlvr.config.agent import RolloutConfig
from rlvr.config.base import Section, typed_union
from rlvr.config.data import BuiltinArithmetic, TaskSource
from rlvr.config.health import HealthConfig
from rlvr.config.optim import OptimConfig


class GRPOLoss(Section):
    """GRPO (Shao et al. 2024): group-normalised advantages, token-level symmetric clip."""

    type: Literal["grpo"] = "grpo"
    eps: float = 0.2
    """Clip range ε (ratio clipped to [1-ε, 1+ε])."""
    scale: Literal["group", "batch", "none"] = "group"
    """Advantage std normalisation: per group, over the batch, or none."""
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "seq-mean-token-mean"
    """How per-token losses are averaged."""


class DAPOLoss(Section):
    """DAPO (Yu et al. 2025): decoupled clip-higher, token-mean loss, dynamic sampling, overlong shaping."""

    type: Literal["dapo"] = "dapo"
    eps_low: float = 0.2
    """Lower clip ε_low."""
    eps_high: float = 0.28
    """Upper clip ε_high (clip-higher keeps low-probability tokens exploring)."""
    dynamic_sampling: bool = True
    """Drop groups whose rewards are all equal and draw more tasks until the batch is full."""
    max_resample_rounds: int = 4
    """Cap on extra draw rounds per step before training on what there is (with a message)."""
    overlong_buffer: int = 0
    """Linear length penalty over the last N tokens before max_new_tokens (0 = off)."""
    overlong_penalty: float = 1.0
    """Penalty at max length."""
    mask_truncated: bool = False
    """Exclude completions cut at max length from the loss."""
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "token-mean"
    """How per-token losses are averaged."""


class GSPOLoss(Section):
    """GSPO (Zheng et al. 2025): length-normalised sequence-level ratio, sequence-level clip."""

    type: Literal["gspo"] = "gspo"
    eps_low: float = 3e-4
    """Lower sequence-ratio clip."""
    eps_high: float = 4e-4
    """Upper sequence-ratio clip."""
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "seq-mean-token-mean"
    """How per-token losses are averaged."""


class DrGRPOLoss(Section):
    """Dr.GRPO (Liu et al. 2025): no std normalisation, no length normalisation."""

    type: Literal["dr_grpo"] = "dr_grpo"
    eps: float = 0.2
    """Clip range."""
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "seq-mean-token-sum-norm"
    """How per-token losses are averaged (Dr.GRPO: sum / constant)."""


class RLOOLoss(Section):
    """RLOO (Ahmadian et al. 2024): leave-one-out baseline."""

    type: Literal["rloo"] = "rloo"
    eps: float = 0.2
    """Clip range."""
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "token-mean"
    """How per-token losses are averaged."""


class ReinforcePPLoss(Section):
    """REINFORCE++ (Hu 2025): batch-normalised advantages."""

    type: Literal["reinforce_pp"] = "reinforce_pp"
    eps: float = 0.2
    """Clip range."""
    group_baseline: bool = True
    """Subtract the group mean before batch normalisation (REINFORCE++-baseline)."""
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "token-mean"
    """How per-token losses are averaged."""


RLLoss = typed_union(GRPOLoss, DAPOLoss, GSPOLoss, DrGRPOLoss, RLOOLoss, ReinforcePPLoss, default="grpo")


class KLConfig(Section):
    """KL to the frozen reference. beta = 0 loads no reference model at all."""

    beta: float = 0.0
    """KL coefficient β."""
    estimator: Literal["k1", "k2", "k3"] = "k3"
    """Schulman's estimator of KL(π || π_ref) per token."""


class RewardTerm(Section):
    """One reward in the composition: a verifier (by kind) or a built-in shaping function, weighted."""

    name: Literal["correct", "format", "length"] = "correct"
    """correct: the task's verifier; format: 1 if an answer is extractable; length: -len/max_new_tokens."""
    weight: float = 1.0
    """Weight in the summed reward (0 = logged only)."""


class SamplingConfig(Section):
    """Rollout generation."""

    group_size: int = 8
    """G: samples per task."""
    temperature: float = 1.0
    """Sampling temperature."""
    top_p: float = 1.0
    """Nucleus sampling threshold."""
    max_new_tokens: int = 64
    """Generation budget per completion."""
    stop: list[str] = []
    """Extra stop strings."""


class RLStage(Section):
    """On-policy RL with verifiable rewards (GRPO, DAPO, GSPO, Dr.GRPO, RLOO, REINFORCE++)."""

    type: Literal["rl"] = "rl"
    name: str = "rl"
    """Stage name (its run sub-directory)."""
    data: TaskSource = BuiltinArithmetic(families=["add3"], n=5000)
    """Training tasks (prompts + hidden gold)."""
    loss: RLLoss = GRPOLoss()
    """Algorithm variant."""
    kl: KLConfig = KLConfig()
    """KL regularisation to the reference."""
    sampling: SamplingConfig = SamplingConfig()
    """Rollout generation."""
    rollout: RolloutConfig = RolloutConfig()
    """Single-turn completions, or the multi-turn closed loop over tool environments (with its limits,
    credit assignment and guards)."""
    rewards: list[RewardTerm] = [RewardTerm()]
    """Reward composition (weighted sum)."""
    optim: OptimConfig = OptimConfig(lr=2e-4, warmup_steps=5, schedule="constant")
    """Optimiser and schedule."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient."""
    max_steps: int = 200
    """RL steps (one rollout batch each)."""
    max_minutes: float | None = None
    """Stop early after this much wall time."""
    tasks_per_step: int = 16
    """Tasks (groups) per rollout batch."""
    ppo_epochs: int = 1
    """μ: policy iterations over each rollout batch."""
    mini_batches: int = 1
    """Optimizer steps per epoch (the batch is split in this many mini-batches)."""
    micro_batch_size: int = 64
    """Sequences per forward/backward (gradient accumulation inside a mini-batch)."""
    save_every: int = 50
    """Write a checkpoint every N steps (0: only at the end)."""
    keep_last: int = 2
    """Keep this many step checkpoints."""
    eval_every: int = 0
    """Held-out eval every N steps for the learning curve (0: only at the end)."""
    verifier_workers: int = 0
    """Verifier worker processes (0 = inline)."""
    health: HealthConfig = HealthConfig()
    """Training-health rules (entropy collapse, KL drift, dead groups, verifier overfitting)."""
