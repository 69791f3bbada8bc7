"""Options of the RL stage that change its rollouts or its advantages, whatever the loss (the 2026 methods).

Each is off by default and enabled by one line of the stage, e.g. ``eden: {enabled: true}``. Combinations
that make no sense are rejected by ``rlvr validate`` from the loss variant's flags
(``rlvr.trainers.variants.check_rl_combination``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import Section


class EdenConfig(Section):
    """EDEN (arXiv:2610.16105): within the same group size, a fraction of each group is sampled from the prompt
    plus one appended embedding position ``e = anchor + σ · rms(E) · ε`` (ε ~ N(0, I) per sample; ``anchor`` the
    mean token embedding, shared by the whole group); those samples are trained on the plain prompt with
    their advantage multiplied by ``advantage_weight``. The model, decoding and evaluation are unchanged."""

    enabled: bool = False
    """Turn EDEN on."""
    fraction: float = Field(0.25, gt=0, lt=1)
    """Share of each group sampled with the perturbed position (rounded, at least 1 sample)."""
    noise_std: float = Field(1.0, ge=0)
    """σ, in units of the embedding matrix's RMS."""
    advantage_weight: float = Field(0.5, ge=0, le=1)
    """Multiplier of the perturbed samples' advantages (the seed leaves it open; 0.5 is our choice)."""


class OffContextConfig(Section):
    """OC-GRPO (Agrawal et al. 2026): for a group whose samples are all wrong, ``fraction`` of it is re-sampled with
    privileged context (the gold answer appended to the prompt) and trained on the plain prompt with a
    per-token truncated importance weight ``w_t = min(π(y_t | x) / π(y_t | x, gold), is_cap)`` folded into its
    advantage."""

    enabled: bool = False
    """Turn OC-GRPO on."""
    fraction: float = Field(0.5, gt=0, le=1)
    """Share of an all-wrong group replaced by privileged samples."""
    hint: Literal["answer", "solution"] = "answer"
    """What the privileged context holds: the gold answer, or the task's worked solution."""
    is_cap: float = Field(2.0, ge=1)
    """Cap of the token importance weight."""


class DoubleRolloutConfig(Section):
    """Double-Rollout (arXiv:2610.16593): each sample's reward is re-estimated as the mean reward of
    ``continuations`` samples drawn from its prefix truncated at ``prefix_fraction`` of its length."""

    enabled: bool = False
    """Turn Double-Rollout on."""
    prefix_fraction: float = Field(0.5, gt=0, lt=1)
    """Where each sample is cut (share of its completion tokens kept)."""
    continuations: int = Field(2, ge=1)
    """Continuations sampled per cut prefix."""


class GuidanceConfig(Section):
    """Guidance with a decreasing weight (GA-GRPO, arXiv:2610.06861): ``demos_per_group`` samples of every group
    are replaced by the task's gold demonstration (``Task.solution``), whose advantage is multiplied by
    ``λ(t) = weight · decay_steps / (decay_steps + t)`` — the shape of the MSE-optimal
    ``λ* = σ0² / (σ0² + R²δ²T)`` with ``decay_steps = σ0² / (R²δ²)``: guidance helps early and fades out."""

    enabled: bool = False
    """Turn guidance on."""
    demos_per_group: int = Field(1, ge=1)
    """Gold demonstrations mixed into each group."""
    weight: float = Field(1.0, ge=0)
    """λ(0)."""
    decay_steps: float = Field(20.0, gt=0)
    """T0: the step at which the weight has halved."""


class ResidualAdvantageConfig(Section):
    """Residual Advantage (arXiv:2610.11519): a teacher's per-step probability residual, minus its value under the
    student, centred within each response, times ``weight``, added to the verifier advantage
    (``rlvr.advantages.corrections.residual_advantage``)."""

    enabled: bool = False
    """Turn the residual advantage on."""
    teacher: str | None = None
    """The teacher model (a local HF folder with the student's tokenizer)."""
    weight: float = Field(1.0, ge=0)
    """Multiplier of the centred residual."""
