"""Preference alignment (DPO family). Each loss is a typed alternative holding only its own fields."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from rlvr.config.base import Section, typed_union
from rlvr.config.data import BuiltinArithmetic, TaskSource
from rlvr.config.health import HealthConfig
from rlvr.config.limits import BatchSize, micro_batch_divides
from rlvr.config.optim import OptimConfig


class DPOLoss(Section):
    """DPO (Rafailov et al. 2023), sigmoid loss; label smoothing gives cDPO."""

    type: Literal["dpo"] = "dpo"
    beta: float = Field(0.1, gt=0)
    """Inverse temperature β."""
    label_smoothing: float = Field(0.0, ge=0, lt=0.5)
    """cDPO label-noise rate ε."""


class IPOLoss(Section):
    """IPO (Azar et al. 2023): squared loss toward margin 1/(2β)."""

    type: Literal["ipo"] = "ipo"
    beta: float = Field(0.1, gt=0)
    """Regularisation β."""


class SimPOLoss(Section):
    """SimPO (Meng et al. 2024): length-normalised, margin γ, no reference model."""

    type: Literal["simpo"] = "simpo"
    beta: float = Field(2.0, gt=0)
    """Reward scale β."""
    gamma: float = 0.5
    """Target margin γ."""


class KTOLoss(Section):
    """KTO (Ethayarajh et al. 2024): unpaired desirable/undesirable labels."""

    type: Literal["kto"] = "kto"
    beta: float = Field(0.1, gt=0)
    """β."""
    lambda_d: float = 1.0
    """Weight of desirable examples."""
    lambda_u: float = 1.0
    """Weight of undesirable examples."""


class ORPOLoss(Section):
    """ORPO (Hong et al. 2024): SFT + λ · odds-ratio term, no reference model."""

    type: Literal["orpo"] = "orpo"
    lam: float = 0.1
    """Weight λ of the odds-ratio term."""


class CPOLoss(Section):
    """CPO (Xu et al. 2024): reference-free DPO-style term + NLL on chosen."""

    type: Literal["cpo"] = "cpo"
    beta: float = Field(0.1, gt=0)
    """β."""
    nll_weight: float = 1.0
    """Weight of the NLL term on chosen."""


class ConstrainedPOLoss(Section):
    """Constrained Preference Optimization (arXiv:2605.20834): DPO plus the explicit constraint that the policy
    itself prefers the chosen answer (logp_w - logp_l >= ``margin``), as an exact hinge penalty. Not ``cpo``
    (Contrastive PO)."""

    type: Literal["constrained_po"] = "constrained_po"
    beta: float = Field(0.1, gt=0)
    """DPO's inverse temperature β."""
    weight: float = Field(1.0, ge=0)
    """Penalty weight λ on ``max(0, margin - (logp_w - logp_l))`` (summed logprobs); 0 is plain DPO."""
    margin: float = 0.0
    """The constraint's margin δ in nats of the policy's own summed log-probabilities (0: chosen at least as
    likely as rejected)."""


PreferenceLoss = typed_union(DPOLoss, IPOLoss, SimPOLoss, KTOLoss, ORPOLoss, CPOLoss, ConstrainedPOLoss,
                             default="dpo")


class PairBuilder(Section):
    """Self-sampling + rule verification: sample the policy on tasks, judge with the verifier, pair."""

    tasks: TaskSource = BuiltinArithmetic(families=["add3"], n=512)
    """Tasks to sample on."""
    samples_per_task: int = Field(8, ge=1)
    """Samples drawn per task."""
    pairs_per_task: int = Field(2, ge=1)
    """Max (correct, incorrect) pairs kept per task."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature."""
    max_new_tokens: int = Field(64, ge=1)
    """Generation budget."""
    heldout_frac: float = 0.1
    """Fraction of pairs held out for preference accuracy."""
    scorer: Literal["verifier", "reward_model", "judge"] = "verifier"
    """Who judges the samples: the task's verifier (correct vs incorrect), a reward model (best vs worst), or a
    model judge scoring each against a rubric (best vs worst; RLAIF, for tasks nothing can verify: the judge and
    rubric must have passed ``rlvr probe judge``)."""
    reward_model_path: str | None = None
    """Reward model folder when ``scorer: reward_model``."""
    judge_model: str | None = None
    """The judge's local checkpoint folder when ``scorer: judge``."""
    rubric: str | None = None
    """What the judge scores against (0-9) when ``scorer: judge``."""
    min_margin: float = 0.0
    """Keep a pair only if its score margin (chosen - rejected) exceeds this."""
    label_noise: float = Field(0.0, ge=0, le=1)
    """Fraction of the TRAINING pairs whose chosen and rejected are swapped, chosen at random by the recipe's seed
    (exactly round(fraction x pairs)): a controlled label-noise study. Held-out pairs stay true, so held-out pair
    accuracy measures the truth; ``pairs/stats.json`` counts the flipped pairs (``pairs_label_flipped``)."""
    batch_size: int = Field(256, ge=1)
    """Completions decoded together in one generation batch: larger batches spread the fixed cost of each
    decode step over more rows (1m model, 4,648 samples: 28 s at 1024 vs 46 s at 256 wall on 2 busy threads;
    CPU time 11.7 vs 12.9 s on 1 thread), at the cost of KV-cache memory
    (layers x 2 x rows x kv_heads x (prompt + max_new_tokens) x head_dim values). The rows share one random
    stream, so another batch size draws other samples (statistically the same, not the same pairs)."""


    @model_validator(mode="after")
    def _judge_fields(self) -> PairBuilder:
        if self.scorer == "judge" and (not self.judge_model or not (self.rubric or "").strip()):
            raise ValueError("scorer: judge needs judge_model (a local checkpoint folder) and rubric")
        if self.scorer != "judge" and (self.judge_model is not None or self.rubric is not None):
            raise ValueError(f"judge_model and rubric are only for scorer: judge (this builder's is {self.scorer!r})")
        return self

    @property
    def model_judged(self) -> bool:
        """A model judge, not an executable oracle, decides chosen and rejected (RLAIF)."""
        return self.scorer == "judge"


class PairsFile(Section):
    """Pairs from a file: TRL's ``{"prompt", "chosen", "rejected"}`` or ``{"prompt", "completion", "label"}`` (docs/data.md)."""

    path: str
    """A JSONL file, or a folder written by ``save_to_disk`` (an HF dataset)."""
    heldout_path: str | None = None
    """Optional held-out pairs for accuracy (same formats)."""
    system_prompt: str | None = None
    """System message put before every prompt of these pairs (default: the recipe's system_prompt)."""
    label_noise: float = Field(0.0, ge=0, le=1)
    """Fraction of the TRAINING pairs whose chosen and rejected are swapped, chosen at random by the recipe's seed
    (exactly round(fraction x pairs)): a controlled label-noise study. Held-out pairs stay true, so held-out pair
    accuracy measures the truth; ``pairs/stats.json`` counts the flipped pairs (``pairs_label_flipped``)."""


class NoWeighting(Section):
    """Every pair weighs 1."""

    type: Literal["none"] = "none"


class UniDPOWeighting(Section):
    """Uni-DPO: quality-aware x performance-aware (focal) pair weights, optional calibrated NLL."""

    type: Literal["uni_dpo"] = "uni_dpo"
    eta: float = 0.7
    """Quality weight sigma(eta * score margin)."""
    perf_beta: float = 2.0
    """Performance weight scale on the length-averaged policy margin."""
    tau_ref: float = 1.0
    """Performance weight offset."""
    focal_gamma: float = 3.0
    """Focal exponent."""
    nll_lambda: float = 0.0
    """Calibrated NLL weight on chosen (0 disables)."""


class RGPOWeighting(Section):
    """RGPO: per-pair reliability weights and label smoothing from annotator votes (EM over all pairs);
    a pair whose votes contradict its label is swapped."""

    type: Literal["rgpo"] = "rgpo"


Weighting = typed_union(NoWeighting, UniDPOWeighting, RGPOWeighting, default="none")


class PreferenceStage(Section):
    """Offline preference optimisation on pairs built by the verifier or read from a file."""

    type: Literal["preference"] = "preference"
    name: str = "preference"
    """Stage name (its run sub-directory)."""
    loss: PreferenceLoss = DPOLoss()
    """Loss variant."""
    pairs: PairBuilder | PairsFile = PairBuilder()
    """Where the pairs come from."""
    weighting: Weighting = NoWeighting()
    """Per-pair weights."""
    optim: OptimConfig = OptimConfig(lr=5e-5, warmup_steps=5)
    """Optimiser and schedule."""
    epochs: int = Field(1, ge=1)
    """Passes over the pairs."""
    max_steps: int | None = Field(None, ge=1)
    """Stop after N optimizer steps (None: epochs decide)."""
    batch_size: BatchSize = Field(32)
    """Pairs per optimizer step."""
    micro_batch_size: BatchSize = Field(32)
    """Pairs per forward (chosen+rejected concatenated)."""
    _micro_batch_divides = field_validator("micro_batch_size")(micro_batch_divides)
    max_length: int = Field(256, ge=2)
    """Truncate prompt+response to this many tokens."""
    save_every: int = Field(0, ge=0)
    """Checkpoint every N steps (0: end only)."""
    keep_last: int = Field(2, ge=0)
    """Keep this many step checkpoints."""
    eval_every: int = Field(0, ge=0)
    """Held-out greedy pass@1 every N steps (0: only the pipeline's after-stage eval)."""
    monitor_every: int = Field(10, ge=0)
    """Held-out pair accuracy and the length-bias probe every N steps (0: start and end only)."""
    probe_prompts: int = Field(16, ge=0)
    """Prompts sampled by the length-bias probe."""
    displacement_tol: float = 0.5
    """Flag likelihood displacement when chosen and rejected logprobs both fell by more than this (nats)."""
    length_bias_tol: float = 0.2
    """Flag length bias when (policy length / chosen length) rose by more than this since the start."""
    health: HealthConfig = HealthConfig()
    """Training-health rules (NaN, KL drift, ...), the same monitor as every policy stage."""
