"""RL with verifiable rewards: the GRPO family. Each algorithm variant is a typed alternative."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from rlvr.config.agent import RolloutConfig
from rlvr.config.base import Section, typed_union
from rlvr.config.data import BuiltinArithmetic, TaskSource
from rlvr.config.health import HealthConfig
from rlvr.config.optim import OptimConfig


def positive_temperature(value: float) -> float:
    """A training temperature: logits are divided by it, so it must be > 0."""
    if not value > 0:
        raise ValueError(f"temperature must be > 0 (the trainer divides the logits by it), got {value}")
    return value


class PolicyLossBase(Section):
    """What every GRPO-family loss shares: overlong filtering, and the recipe defaults a variant turns on
    (``default_dynamic_sampling``, ``default_overlong``; DAPO's are on, everyone else's off)."""

    mask_truncated: bool = False
    """Overlong filtering: exclude completions cut at max_new_tokens from the loss (DAPO's overlong filtering)."""
    default_dynamic_sampling: ClassVar[str] = "off"
    default_overlong: ClassVar[bool] = False


class GRPOLoss(PolicyLossBase):
    """GRPO (Shao et al. 2024): group-normalised advantages, token-level symmetric clip."""

    type: Literal["grpo"] = "grpo"
    eps: float = 0.2
    """Clip range ε (ratio clipped to [1-ε, 1+ε])."""
    scale: Literal["group", "batch", "none"] = "group"
    """Advantage std normalisation: per group, over the batch, or none."""
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "seq-mean-token-mean"
    """How per-token losses are averaged."""


class DAPOLoss(PolicyLossBase):
    """DAPO (Yu et al. 2025): decoupled clip-higher, token-mean loss, dynamic sampling, overlong shaping.

    Its other parts are options any variant can use; DAPO only turns them on by default, as in the
    paper's final recipe: ``sampling.dynamic_sampling`` defaults to ``correct`` (a group is kept when
    ``0 < #correct < G``: eq. 11) and an ``overlong`` reward term (soft punishment over the last fifth of
    the generation budget — the paper's 4096 of 20480 tokens — weight 1, the scale of the correctness
    reward) is added unless the recipe lists one; overlong *filtering* (``loss.mask_truncated``) stays
    off, as in the final recipe.
    """

    type: Literal["dapo"] = "dapo"
    eps_low: float = 0.2
    """Lower clip ε_low."""
    eps_high: float = 0.28
    """Upper clip ε_high (clip-higher keeps low-probability tokens exploring)."""
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "token-mean"
    """How per-token losses are averaged."""
    default_dynamic_sampling: ClassVar[str] = "correct"
    default_overlong: ClassVar[bool] = True


class GSPOLoss(PolicyLossBase):
    """GSPO (Zheng et al. 2025): length-normalised sequence-level ratio, sequence-level clip."""

    type: Literal["gspo"] = "gspo"
    eps_low: float = 3e-4
    """Lower sequence-ratio clip."""
    eps_high: float = 4e-4
    """Upper sequence-ratio clip."""
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "seq-mean-token-mean"
    """How per-token losses are averaged."""


class DrGRPOLoss(PolicyLossBase):
    """Dr.GRPO (Liu et al. 2025): no std normalisation, no length normalisation."""

    type: Literal["dr_grpo"] = "dr_grpo"
    eps: float = 0.2
    """Clip range."""
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "seq-mean-token-sum-norm"
    """How per-token losses are averaged (Dr.GRPO: sum / constant)."""


class RLOOLoss(PolicyLossBase):
    """RLOO (Ahmadian et al. 2024): leave-one-out baseline."""

    type: Literal["rloo"] = "rloo"
    eps: float = 0.2
    """Clip range."""
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "token-mean"
    """How per-token losses are averaged."""


class ReinforcePPLoss(PolicyLossBase):
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
    """One reward in the composition: the task's verifier, a built-in shaping term, or your own Python function."""

    name: Literal["correct", "format", "length", "overlong", "python", "judge"] = "correct"
    """correct: the task's verifier; format: 1 if an answer is extractable; length: -len/max_new_tokens;
    overlong: DAPO's soft overlong punishment (0 up to max_new_tokens - buffer, then linearly down to -1 at
    max_new_tokens); python: ``function``; judge: a local model scores the completion against ``rubric``
    in [0, 1] (RLAIF, not RLVR: refused unless probed, see ``rlvr probe judge``)."""
    weight: float = 1.0
    """Weight in the summed reward (0 = logged only)."""
    function: str | None = None
    """name: python only: ``module:function`` (importable from the working directory) called as ``f(task, completion)`` -> float or Verdict."""
    timeout_s: float = Field(10.0, gt=0)
    """name: python only: seconds one call may take; a call that raises or runs past this is an ``infra`` verdict."""
    judge_model: str | None = None
    """name: judge only: local folder of the judge (an HF causal LM + tokenizer)."""
    rubric: str | None = None
    """name: judge only: what the judge is told to score (e.g. "Score 9 if the response answers the task
    correctly and concisely, 0 if not.")."""
    buffer: int | None = Field(None, ge=0)
    """name: overlong only: the length of the penalty ramp in tokens (None: max_new_tokens // 5, DAPO's 4096
    of 20480; 0: the term is always 0)."""

    @model_validator(mode="after")
    def _function_iff_python(self) -> "RewardTerm":
        if self.name == "python" and not self.function:
            raise ValueError("a reward with name: python needs function: 'module:function'")
        if self.name == "python" and ":" not in self.function:
            raise ValueError(f"function {self.function!r} must be 'module:function' (e.g. my_rewards:score)")
        if self.name != "python" and self.function is not None:
            raise ValueError(f"function is only for name: python (this term is {self.name!r})")
        if self.name == "judge" and (not self.judge_model or not (self.rubric or "").strip()):
            raise ValueError("a reward with name: judge needs judge_model (a local checkpoint folder) and rubric")
        if self.name != "judge" and (self.judge_model is not None or self.rubric is not None):
            raise ValueError(f"judge_model and rubric are only for name: judge (this term is {self.name!r})")
        if self.name != "overlong" and self.buffer is not None:
            raise ValueError(f"buffer is only for name: overlong (this term is {self.name!r})")
        return self

    @property
    def key(self) -> str:
        """The term's metric name: ``reward/<key>`` (a python term is named by its function)."""
        return self.function.rsplit(":", 1)[1] if self.name == "python" else self.name

    @property
    def model_judged(self) -> bool:
        """A model, not an executable oracle, gives this reward (RLAIF)."""
        return self.name == "judge"


class SamplingConfig(Section):
    """Rollout generation."""

    group_size: int = Field(8, ge=1)
    """G: samples per task."""
    temperature: float = 1.0
    """Sampling temperature (> 0: training divides the logits by it, so T = 0 / greedy cannot be trained on)."""
    top_p: float = 1.0
    """Nucleus sampling threshold."""
    max_new_tokens: int = Field(64, ge=1)
    """Generation budget per completion."""
    stop: list[str] = []
    """Extra stop strings (a completion ends with the token that completes one; finish reason ``stop``)."""
    dynamic_sampling: Literal["off", "correct", "reward"] | None = None
    """Dynamic sampling (DAPO, any variant): drop uninformative groups and draw more tasks until the batch
    is full. ``correct``: a group is informative when its verifier outcomes are mixed (0 < #correct < G);
    ``reward``: when its composed reward varies (format, length and overlong terms included); ``off``.
    None: the loss's default (DAPO: correct; the others: off)."""
    max_resample_rounds: int = Field(4, ge=0)
    """Dynamic sampling: cap on extra draw rounds per step before training on what there is (with a
    message; 0: none)."""

    @field_validator("temperature")
    @classmethod
    def _positive_temperature(cls, value: float) -> float:
        return positive_temperature(value)
    row_seeds: bool = False
    """Seed each sample by (step seed, row index): samples do not depend on how the batch is split across
    workers (the Ray backend always does this; set it for a single-process run to compare with one)."""


class MismatchCorrection(Section):
    """Sampler/trainer probability mismatch correction (``rlvr.losses.mismatch``): truncated importance
    sampling at token level and a geometric-mean sequence mask. A no-op (to float rounding) when the
    sampler computes the trainer's own fp32 logprobs, as the in-process HF engine does."""

    enabled: bool = True
    """Weight each token by min(π_trainer/π_sampler, tis_cap) and mask sequences outside the band."""
    tis_cap: float = 2.0
    """Cap C of the token-level importance weight (truncated IS, Yao et al. 2025)."""
    seq_low: float = 0.999
    """Mask a sequence whose geometric-mean ratio exp(mean_t log π_trainer/π_sampler) is below this."""
    seq_high: float = 1.001
    """... or above this (masked sequences still count in the loss denominators)."""

    @model_validator(mode="after")
    def _band(self) -> "MismatchCorrection":
        if not (0 < self.seq_low <= 1.0 <= self.seq_high):
            raise ValueError(f"correction: need 0 < seq_low <= 1 <= seq_high, got {self.seq_low}, {self.seq_high}")
        if self.tis_cap < 1.0:
            raise ValueError(f"correction.tis_cap must be >= 1 (the weight of a matching token), got {self.tis_cap}")
        return self


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
    rewards: list[RewardTerm] = Field([RewardTerm()], min_length=1)
    """Reward composition (weighted sum)."""
    optim: OptimConfig = OptimConfig(lr=2e-4, warmup_steps=5, schedule="constant")
    """Optimiser and schedule."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient."""
    max_steps: int = Field(200, ge=1)
    """RL steps (one rollout batch each)."""
    max_minutes: float | None = None
    """Stop early after this much wall time."""
    tasks_per_step: int = Field(16, ge=1)
    """Tasks (groups) per rollout batch."""
    ppo_epochs: int = Field(1, ge=1)
    """μ: policy iterations over each rollout batch (μ > 1 or mini_batches > 1: old logprobs are recomputed
    by the training forward before the first update)."""
    mini_batches: int = Field(1, ge=1)
    """Optimizer steps per epoch (the batch is split in this many mini-batches, shuffled by (seed, step,
    epoch))."""
    micro_batch_size: int = Field(64, ge=1)
    """Sequences per forward/backward (gradient accumulation inside a mini-batch)."""
    save_every: int = Field(50, ge=0)
    """Write a checkpoint every N steps (0: only at the end)."""
    keep_last: int = Field(2, ge=0)
    """Keep this many step checkpoints."""
    eval_every: int = Field(0, ge=0)
    """Held-out eval every N steps for the learning curve (0: only at the end)."""
    verifier_workers: int = Field(0, ge=0)
    """Verifier worker processes (0 = inline)."""
    health: HealthConfig = HealthConfig()
    """Training-health rules (entropy collapse, KL drift, dead groups, verifier overfitting)."""

    @field_validator("rewards")
    @classmethod
    def _unique_reward_keys(cls, v: list[RewardTerm]) -> list[RewardTerm]:
        keys = [t.key for t in v]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise ValueError(f"reward terms must have distinct names (a python term is named by its function): {dup}")
        if not any(t.weight != 0 for t in v):
            raise ValueError("at least one reward term needs a non-zero weight")
        return v

    @model_validator(mode="after")
    def _variant_defaults(self) -> "RLStage":
        """Make the loss's recipe defaults explicit (the resolved config shows them): ``sampling.dynamic_sampling``
        None -> the loss's default; a loss whose default includes overlong shaping gets an ``overlong`` reward
        term unless the recipe lists one (list it with weight 0 to turn it off)."""
        multi = self.rollout.mode == "multi_turn"
        if multi:  # the closed loop's reward is the environment's end state (+ its guards' shaping)
            if self.sampling.dynamic_sampling not in (None, "off"):
                raise ValueError("sampling.dynamic_sampling is for single-turn rollouts; a multi_turn stage trains "
                                 "on every group (zero-variance groups cost no backward)")
            extra = [t.key for t in self.rewards if t.name != "correct" and t.weight != 0]
            if extra:
                raise ValueError(f"reward terms {extra} apply to single-turn completions; a multi_turn stage is "
                                 "rewarded by the environment's end state and rollout.guards (budget and tool-error "
                                 "penalties)")
        if self.sampling.dynamic_sampling is None:
            default = "off" if multi else self.loss.default_dynamic_sampling
            self.sampling = self.sampling.model_copy(update={"dynamic_sampling": default})
        if self.loss.default_overlong and not multi and not any(t.name == "overlong" for t in self.rewards):
            self.rewards = [*self.rewards, RewardTerm(name="overlong")]
        return self
    correction: MismatchCorrection = MismatchCorrection()
    """Sampler/trainer mismatch correction (on by default; see docs/scaling.md)."""
