"""RL with verifiable rewards: the GRPO family. Each algorithm variant is a typed alternative."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from rlvr.config.agent import RolloutConfig
from rlvr.config.base import Section, typed_union
from rlvr.config.data import BuiltinArithmetic, TaskSource
from rlvr.config.health import HealthConfig
from rlvr.config.limits import NewTokens, Samples, TopK, TopP
from rlvr.config.methods import (
    DoubleRolloutConfig,
    EdenConfig,
    GuidanceConfig,
    OffContextConfig,
    ResidualAdvantageConfig,
)
from rlvr.config.optim import OptimConfig


def positive_temperature(value: float) -> float:
    """A training temperature: logits are divided by it, so it must be > 0."""
    if not value > 0:
        raise ValueError(f"temperature must be > 0 (the trainer divides the logits by it), got {value}")
    return value


class PolicyLossBase(Section):
    """What every GRPO-family loss shares: overlong filtering, and the recipe defaults a variant turns on
    (``default_dynamic_sampling``, ``default_overlong``; DAPO's are on, everyone else's off)."""

    @model_validator(mode="after")
    def _clip_order(self):
        """A decoupled clip needs ε_high ≥ ε_low (clip-higher widens the upper side, never inverts it)."""
        lo, hi = getattr(self, "eps_low", None), getattr(self, "eps_high", None)
        if self.clip_order_checked and lo is not None and hi is not None and hi < lo:
            raise ValueError(f"eps_high {hi} < eps_low {lo}: the upper clip must be at least the lower one "
                             "(DAPO's clip-higher: eps_low 0.2, eps_high 0.28)")
        return self

    mask_truncated: bool = False
    """Overlong filtering: exclude completions cut at max_new_tokens from the loss (DAPO's overlong filtering)."""
    default_dynamic_sampling: ClassVar[str] = "off"
    default_overlong: ClassVar[bool] = False
    clip_order_checked: ClassVar[bool] = True
    """Refuse ε_high < ε_low (a trust-region clip); a loss whose ε bound something else turns it off."""


class GRPOLoss(PolicyLossBase):
    """GRPO (Shao et al. 2024): group-normalised advantages, token-level symmetric clip."""

    type: Literal["grpo"] = "grpo"
    eps: float = Field(0.2, ge=0)
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
    eps_low: float = Field(0.2, ge=0)
    """Lower clip ε_low."""
    eps_high: float = Field(0.28, ge=0)
    """Upper clip ε_high (clip-higher keeps low-probability tokens exploring)."""
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "token-mean"
    """How per-token losses are averaged."""
    default_dynamic_sampling: ClassVar[str] = "correct"
    default_overlong: ClassVar[bool] = True


class GSPOLoss(PolicyLossBase):
    """GSPO (Zheng et al. 2025): length-normalised sequence-level ratio, sequence-level clip."""

    type: Literal["gspo"] = "gspo"
    eps_low: float = Field(3e-4, ge=0)
    """Lower sequence-ratio clip."""
    eps_high: float = Field(4e-4, ge=0)
    """Upper sequence-ratio clip."""
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "seq-mean-token-mean"
    """How per-token losses are averaged."""


class DrGRPOLoss(PolicyLossBase):
    """Dr.GRPO (Liu et al. 2025): no std normalisation, no length normalisation."""

    type: Literal["dr_grpo"] = "dr_grpo"
    eps: float = Field(0.2, ge=0)
    """Clip range."""
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "seq-mean-token-sum-norm"
    """How per-token losses are averaged (Dr.GRPO: sum / constant)."""


class RLOOLoss(PolicyLossBase):
    """RLOO (Ahmadian et al. 2024): leave-one-out baseline."""

    type: Literal["rloo"] = "rloo"
    eps: float = Field(0.2, ge=0)
    """Clip range."""
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "token-mean"
    """How per-token losses are averaged."""


class ReinforcePPLoss(PolicyLossBase):
    """REINFORCE++ (Hu 2025): batch-normalised advantages."""

    type: Literal["reinforce_pp"] = "reinforce_pp"
    eps: float = Field(0.2, ge=0)
    """Clip range."""
    group_baseline: bool = True
    """Subtract the group mean before batch normalisation (REINFORCE++-baseline)."""
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "token-mean"
    """How per-token losses are averaged."""


AGG = Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"]


class SignBalanceLoss(PolicyLossBase):
    """SignBalance (RIT + Adobe 2026): the verifier's sign with a global magnitude instead of the group's std.

    ``A_i = c · s_i · λ_{s_i}``, ``s_i = sign(r_i − mean_g r)``, ``λ_+ = N / (2 N_+)``, ``λ_− = N / (2 N_−)``
    over the batch's informative samples: the batch mean is 0 and a (possibly guessed) correct answer's
    magnitude no longer depends on how rare it is in its own group (``rlvr.advantages.corrections.sign_balance``)."""

    type: Literal["sign_balance"] = "sign_balance"
    eps: float = 0.2
    """Clip range ε (token-level, symmetric)."""
    scale: float = Field(1.0, gt=0)
    """c: the global advantage magnitude."""
    aggregation: AGG = "seq-mean-token-mean"
    """How per-token losses are averaged."""


class AsymGRPOLoss(PolicyLossBase):
    """AsymGRPO (NC State + CWRU 2026): GRPO advantages with the positive and negative channels modulated
    separately, ``A' = α_+ A`` where A > 0 and ``α_− A`` where A < 0 (keep productive entropy on the
    successes, damp the noisy entropy that failed rollouts inject)."""

    type: Literal["asym_grpo"] = "asym_grpo"
    eps: float = 0.2
    """Clip range ε."""
    pos_weight: float = Field(1.0, ge=0)
    """α_+: multiplier of positive advantages."""
    neg_weight: float = Field(0.5, ge=0)
    """α_−: multiplier of negative advantages."""
    aggregation: AGG = "seq-mean-token-mean"
    """How per-token losses are averaged."""


class STEERLoss(PolicyLossBase):
    """STEER (ZJU + Tencent 2026): GRPO's clipped surrogate, each token down-weighted by its estimated entropy
    change ``κ_t = m_t |A_t| p_t |log p_t + H_t|``: ``w_t = min(1, τ / κ_t)`` (``rlvr.losses.policy_variants``)."""

    type: Literal["steer"] = "steer"
    eps: float = 0.2
    """Clip range ε."""
    tau: float = Field(0.5, gt=0)
    """τ: the entropy-change speed limit; tokens with κ_t <= τ keep weight 1."""
    aggregation: AGG = "seq-mean-token-mean"
    """How per-token losses are averaged."""


class CISPOLoss(PolicyLossBase):
    """CISPO (MiniMax-M1 2025): clip the importance weight, not the update — every token keeps its gradient:
    ``loss_t = −sg(clip(r_t, 1−ε_low, 1+ε_high)) A_t log π_t``."""

    type: Literal["cispo"] = "cispo"
    clip_order_checked: ClassVar[bool] = False
    """CISPO's bounds clip an importance weight, not a trust region: ε_low = 1 (no lower bound) above
    ε_high is its paper's setting, so the clip-order check does not apply."""
    eps_low: float = Field(1.0, ge=0, le=1)
    """Lower IS-weight clip (1.0: no lower bound, as in the paper)."""
    eps_high: float = Field(0.28, ge=0)
    """Upper IS-weight clip."""
    aggregation: AGG = "token-mean"
    """How per-token losses are averaged."""


class SAPOLoss(PolicyLossBase):
    """SAPO (Qwen 2025): a soft, temperature-controlled gate instead of the hard clip:
    ``loss_t = −(4/τ) σ(τ (r_t − 1)) A_t`` with τ = τ_pos for A > 0 and τ_neg for A < 0."""

    type: Literal["sapo"] = "sapo"
    tau_pos: float = Field(1.0, gt=0)
    """Gate temperature for positive advantages."""
    tau_neg: float = Field(1.05, gt=0)
    """Gate temperature for negative advantages (sharper: negative updates fade out faster)."""
    aggregation: AGG = "token-mean"
    """How per-token losses are averaged."""


class DARLoss(PolicyLossBase):
    """DAR (ICLR 2026): RL-free advantage-weighted regression on the rollouts,
    ``loss_t = −w_i log π_t``, ``w_i = min(exp(α · mean_t log(π_0/π_old)) · exp(A_i/β), w_max)`` with π_0 the
    frozen reference and A_i GRPO's group advantage. It regularises towards π_0 itself (kl.beta must be 0)
    and every sample trains (a zero advantage still has weight ≈ 1)."""

    type: Literal["dar"] = "dar"
    alpha: float = Field(0.5, ge=0, le=1)
    """α: 1 stays near the initial model, 0 near the current policy."""
    beta: float = Field(1.0, gt=0)
    """β: advantage temperature."""
    max_weight: float = Field(20.0, gt=0)
    """Clip of the product weight (against exploding gradients)."""
    aggregation: AGG = "token-mean"
    """How per-token losses are averaged."""


RLLoss = typed_union(GRPOLoss, DAPOLoss, GSPOLoss, DrGRPOLoss, RLOOLoss, ReinforcePPLoss, SignBalanceLoss,
                     AsymGRPOLoss, STEERLoss, CISPOLoss, SAPOLoss, DARLoss, default="grpo")


class KLConfig(Section):
    """KL to the frozen reference. beta = 0 loads no reference model at all."""

    beta: float = Field(0.0, ge=0)
    """KL coefficient β (a negative β would reward moving away from the reference)."""
    estimator: Literal["k1", "k2", "k3"] = "k3"
    """Schulman's estimator of KL(π || π_ref) per token."""
    rows: Literal["all", "trained"] = "all"
    """Which rows carry the KL term. ``all``: every sampled row, zero-advantage ones included (they are then
    forwarded and backwarded for the KL gradient alone). ``trained``: only the rows with a policy-gradient
    signal (non-zero advantage); the zero-advantage rows of dead groups are skipped as at β = 0 (no forward,
    no backward) and still count in the loss normaliser, so each trained token's KL weight is the same as
    with ``all``. The leash then acts where the update pulls, at the cost of a β = 0 step (the quickstart's
    GRPO stage: ~60% of its rows are in dead groups), but it is a weaker leash: there, over 4 seeds, mul31
    held-out 63.6% on average against 65.8% with ``all`` (docs/health.md, last section)."""


class RewardTerm(Section):
    """One reward in the composition: the task's verifier, a built-in shaping term, or your own Python function."""

    name: Literal["correct", "format", "length", "overlong", "python", "checklist", "judge"] = "correct"
    """correct: the task's verifier; format: 1 if an answer is extractable; length: -len/max_new_tokens;
    overlong: DAPO's soft overlong punishment (0 up to max_new_tokens - buffer, then linearly down to -1 at
    max_new_tokens); python: ``function``; checklist: TCR's process reward, the share of the task's worked
    steps stated correctly in place (``rlvr.verifiers.checklist``; built-in arithmetic); judge: a local model
    scores the completion against ``rubric`` in [0, 1] (RLAIF, not RLVR: refused unless probed, see
    ``rlvr probe judge``)."""
    weight: float = 1.0
    """Weight in the summed reward (0 = logged only)."""
    function: str | None = None
    """name: python only: ``module:function`` (importable from the working directory): ``f(task, completion)`` -> float or Verdict, or TRL's ``f(completions, **kwargs)`` -> list of floats (docs/rewards.md)."""
    timeout_s: float = Field(10.0, gt=0)
    """name: python only: seconds one call may take (also at validate); a call that raises or runs past this is an ``infra`` verdict."""
    judge_model: str | None = None
    """name: judge only: local folder of the judge (an HF causal LM + tokenizer)."""
    rubric: str | None = None
    """name: judge only: what the judge is told to score (e.g. "Score 9 if the response answers the task
    correctly and concisely, 0 if not.")."""
    buffer: int | None = Field(None, ge=0)
    """name: overlong only: the length of the penalty ramp in tokens (None: max_new_tokens // 5, DAPO's 4096
    of 20480; 0: the term is always 0)."""

    @model_validator(mode="after")
    def _function_iff_python(self) -> RewardTerm:
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

    group_size: Samples = 8
    """G: samples per task."""
    temperature: float = 1.0
    """Sampling temperature (> 0: training divides the logits by it, so T = 0 / greedy cannot be trained on)."""
    top_p: TopP = 1.0
    """Nucleus sampling threshold (> 0 and <= 1; 1: off). The behaviour logprobs and every logprob the update compares (ratio,
    old, reference, mismatch correction) are those of the renormalised nucleus (``rlvr.models.truncation``)."""
    top_k: TopK = 0
    """Sample from the k most probable tokens only (0: off), applied before ``top_p``; logprobs as for top_p."""
    max_new_tokens: NewTokens = 64
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

    @field_validator("dynamic_sampling", mode="before")
    @classmethod
    def _yaml_off(cls, value):
        """YAML reads an unquoted ``off`` (``--set ...dynamic_sampling=off``) as False: it means "off"."""
        return "off" if value is False else value
    row_seeds: bool = False
    """Seed each sample by (step seed, row index): samples do not depend on how the batch is split across
    workers (the Ray backend always does this; set it for a single-process run to compare with one)."""
    decode_threads: int | Literal["auto"] | None = "auto"
    """Intra-op CPU threads while the in-process engine generates (restored afterwards). None: torch's
    setting; "auto": one thread when a decode batch is small on the CPU (rows × parameters below
    ``hf_engine.SINGLE_THREAD_DECODE_WORK``), else torch's setting. A small model's decode ops last tens of
    microseconds, so waking a second thread for each costs more than it saves; measure with bench/grpo_vs_trl.py --rlvr-decode-threads N."""


class MismatchCorrection(Section):
    """Sampler/trainer probability mismatch correction (``rlvr.losses.mismatch``): truncated importance
    sampling at token level and a geometric-mean sequence mask. A no-op (to float rounding) when the
    sampler computes the trainer's own fp32 logprobs, as the in-process HF engine does."""

    enabled: bool = True
    """Weight each token by min(π_trainer/π_sampler, tis_cap) and mask sequences outside the band."""
    tis_cap: float = 2.0
    """Cap C of the token-level importance weight (truncated IS, Yao et al. 2025)."""
    seq_low: float = 0.98
    """Mask a sequence whose geometric-mean ratio exp(mean_t log π_trainer/π_sampler) is below this (the default
    band lets through the bf16-vs-float32 gap, |mean log ratio| <= 1.4e-2 measured, and masks a sequence off by
    0.04 nats a token or more; docs/scaling.md)."""
    seq_high: float = 1.02
    """... or above this (masked sequences still count in the loss denominators: they train on nothing)."""

    @model_validator(mode="after")
    def _band(self) -> MismatchCorrection:
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
    """Stop early after this much wall time.
    A stage it cuts before ``max_steps`` says so (console, summary.json: steps done of planned)."""
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
    save_every_s: float = Field(0.0, ge=0)
    """Also write a checkpoint at the first step end after each multiple of this many seconds of the process's
    wall-clock age (imports and loading count; 0: off); each is logged as a ``timed_checkpoint`` event."""
    keep_last: int = Field(2, ge=0)
    """Keep this many step checkpoints (0: all)."""
    eval_every: int = Field(0, ge=0)
    """Held-out eval every N steps for the learning curve (0: only at the end)."""
    verifier_workers: int = Field(0, ge=0)
    """Verifier worker processes (0 = inline)."""
    max_infra_frac: float = Field(0.5, ge=0, le=1)
    """Pause the run (stop with a message, keeping the last checkpoint) when more than this fraction of a
    step's verifications are ``infra`` (the verifier raised, hung or crashed): training on such a batch
    would learn from noise. ``infra`` rollouts below it are kept out of the advantages and counted."""
    health: HealthConfig = HealthConfig()
    """Training-health rules (entropy collapse, KL drift, dead groups, verifier overfitting)."""
    eden: EdenConfig = EdenConfig()
    """EDEN: a fraction of each group sampled with a perturbed extra embedding position (docs/methods.md)."""
    off_context: OffContextConfig = OffContextConfig()
    """OC-GRPO: privileged-context samples for all-wrong groups, importance-corrected (docs/methods.md)."""
    double_rollout: DoubleRolloutConfig = DoubleRolloutConfig()
    """Double-Rollout: rewards re-estimated from continuations of truncated prefixes (docs/methods.md)."""
    guidance: GuidanceConfig = GuidanceConfig()
    """GA-GRPO guidance: gold demonstrations in each group with a decreasing weight (docs/methods.md)."""
    residual: ResidualAdvantageConfig = ResidualAdvantageConfig()
    """Residual Advantage: a teacher's centred per-step residual added to the advantage (docs/methods.md)."""
    start: Literal["previous", "screened"] = "previous"
    """Where the stage starts: the previous stage's final model, or (screened) the best by ``start_statistic`` of
    ``start_from``'s saved checkpoints (``checkpoints/step-*`` and ``final``), each screened at this stage's G and
    temperature on its tasks (rlvr.monitoring.screen); the choice is recorded in summary.json (``start``)."""
    start_from: str | None = None
    """With start: screened, the earlier stage whose checkpoints are screened (None: the latest earlier stage that
    produces a policy). Keep them with that stage's ``save_every`` and ``keep_last: 0``."""
    start_statistic: Literal["pass_at_1", "rank", "signal_frac_observed", "signal_frac", "adv_var",
                             "entropy"] = "pass_at_1"
    """The screen's statistic that picks the start. pass_at_1: the highest greedy pass@1 among the checkpoints RL
    can use (not below p*(G), a measured informative-group share >= ``plan.no_signal``) -- the measured share
    predicts what RL adds, pass@1 where it ends, and the later checkpoint ended higher on both tasks checked
    (docs/plan_checked.md); rank: the screen's own order (usable first, then the measured informative-group
    share, then entropy); any other: its largest value."""
    start_tasks: int = Field(32, ge=1)
    """Tasks of ``data`` screened per checkpoint with start: screened."""

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
    def _variant_defaults(self) -> RLStage:
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
        if self.residual.enabled and not self.residual.teacher:
            raise ValueError("residual.enabled needs residual.teacher: a local model folder (the teacher)")
        filled = set()
        if self.sampling.dynamic_sampling is None:
            default = "off" if multi else self.loss.default_dynamic_sampling
            self.sampling = self.sampling.model_copy(update={"dynamic_sampling": default})
            filled.add("dynamic_sampling")
        if self.loss.default_overlong and not multi and not any(t.name == "overlong" for t in self.rewards):
            self.rewards = [*self.rewards, RewardTerm(name="overlong")]
            filled.add("overlong")
        self._variant_filled = frozenset(filled)
        return self

    correction: MismatchCorrection = MismatchCorrection()
    """Sampler/trainer mismatch correction (on by default; see docs/scaling.md)."""

    _variant_filled: frozenset = PrivateAttr(default=frozenset())
    """What ``_variant_defaults`` filled in (not the recipe): a ``--set`` that switches the loss re-derives them."""

    def unfill_variant_defaults(self, dumped: dict) -> dict:
        """``dumped`` (this stage's ``model_dump``) without the values the loss variant filled in, so that an
        override applied to it and validated again gets the defaults of the loss it then names (``--set
        stages.rl.loss.type=dapo`` on a GRPO recipe turns DAPO's dynamic sampling on, and back); values the recipe
        or an earlier override set are kept."""
        if "dynamic_sampling" in self._variant_filled:
            dumped["sampling"]["dynamic_sampling"] = None
        if "overlong" in self._variant_filled:
            at = max(i for i, t in enumerate(dumped["rewards"]) if t.get("name") == "overlong")
            dumped["rewards"] = [t for i, t in enumerate(dumped["rewards"]) if i != at]
        return dumped
