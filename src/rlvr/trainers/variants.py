"""The variant tables: each algorithm variant is ONE entry, keyed by its config ``type``.

An entry says everything the trainers need to know about a variant — its advantage estimator, its
clip range and level, its loss, whether it reads a reference — so no trainer ever branches on a
variant's identity. Adding a variant = its config class (``rlvr.config``), its pure functions
(``rlvr.advantages`` / ``rlvr.losses``), one entry here and its test (docs/architecture.md).

Aggregation (how per-token losses are averaged) is a field of every RL loss config; DAPO's other
parts (dynamic sampling, overlong shaping, masking truncated completions) are options any variant
can use (``sampling.dynamic_sampling``, the ``overlong`` reward term, ``loss.mask_truncated``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from rlvr import advantages as adv
from rlvr.advantages.credit import hgpo_credit, trajectory_credit, turn_discounted_credit
from rlvr.advantages.turn_credit import arpo_credit, outcome_targets, steppo_credit, turn_gae, turn_ppo_credit
from rlvr.losses import preference as pl
from rlvr.losses.pair_weights import uni_dpo_calibrated_nll, uni_dpo_weights

# ------------------------------------------------------------------------------------------- RL


@dataclass(frozen=True)
class RLVariant:
    """One GRPO-family algorithm.

    ``advantages(cfg, rewards [n, G], valid [n, G]) -> [n, G]``; ``clip(cfg) -> (eps_low, eps_high, level)``
    with level ``token`` (per-token ratio) or ``sequence`` (GSPO's length-normalised sequence ratio);
    ``group_baseline(cfg)``: the estimator compares samples within a group (a group of 1 trains on nothing).
    """

    advantages: Callable[..., torch.Tensor]
    clip: Callable[..., tuple[float, float, str]]
    group_baseline: Callable[..., bool] = lambda cfg: True


def _symmetric(cfg) -> tuple[float, float, str]:
    return cfg.eps, cfg.eps, "token"


def _decoupled(level: str):
    return lambda cfg: (cfg.eps_low, cfg.eps_high, level)


RL_VARIANTS: dict[str, RLVariant] = {
    "grpo": RLVariant(lambda c, r, v: adv.grpo(r, scale=c.scale, mask=v), _symmetric),
    "dapo": RLVariant(lambda c, r, v: adv.grpo(r, scale="group", mask=v), _decoupled("token")),
    "gspo": RLVariant(lambda c, r, v: adv.grpo(r, scale="group", mask=v), _decoupled("sequence")),
    "dr_grpo": RLVariant(lambda c, r, v: adv.dr_grpo(r, mask=v), _symmetric),
    "rloo": RLVariant(lambda c, r, v: adv.rloo(r, mask=v), _symmetric),
    "reinforce_pp": RLVariant(
        lambda c, r, v: adv.reinforce_pp(r, baseline="group" if c.group_baseline else "none", mask=v), _symmetric,
        group_baseline=lambda c: c.group_baseline),
}


def rl_variant(loss_cfg) -> RLVariant:
    return RL_VARIANTS[loss_cfg.type]


# ------------------------------------------------------------------------------ multi-turn credit


@dataclass(frozen=True)
class CreditInput:
    """The turns of a batch, flat (a trajectory's turns in order): group, trajectory, depth and state of each;
    where the estimator needs them, the learned critic's V(s_t) (``values``) and the environment's step
    scores before / after each turn (``score_before``, ``score_after``)."""

    groups: list
    traj_ids: list
    turn_index: list[int]
    states: list
    values: list | None = None
    score_before: list | None = None
    score_after: list | None = None


CREDIT_ESTIMATORS: dict[str, Callable[..., torch.Tensor]] = {
    "trajectory": lambda c, r, t: trajectory_credit(r, t.groups, t.traj_ids, scale=c.scale),
    "turn": lambda c, r, t: turn_discounted_credit(r, t.groups, t.traj_ids, t.turn_index, gamma=c.gamma,
                                                   scale=c.scale),
    "hgpo": lambda c, r, t: hgpo_credit(r, t.groups, t.traj_ids, t.states, gamma=c.gamma,
                                        max_history=c.max_history, alpha=c.alpha, step_weight=c.step_weight,
                                        scale=c.scale),
    "arpo": lambda c, r, t: arpo_credit(r, t.groups, t.traj_ids, t.values, mix=c.mix, scale=c.scale),
    "steppo": lambda c, r, t: steppo_credit(r, t.groups, t.traj_ids, t.score_before, t.score_after,
                                            step_weight=c.step_weight, scale=c.scale),
    "turn_ppo": lambda c, r, t: turn_ppo_credit(r, t.traj_ids, t.values, gamma=c.gamma, lam=c.lam, scale=c.scale),
}
"""``rollout.credit.type`` -> ``(cfg, turn_rewards [N], CreditInput) -> [N]`` per-turn advantages
(``rlvr.advantages.credit``, ``rlvr.advantages.turn_credit``)."""

CREDIT_CRITIC_TARGETS: dict[str, Callable[..., torch.Tensor]] = {
    "arpo": lambda c, r, t: outcome_targets(r, t.traj_ids),
    "turn_ppo": lambda c, r, t: turn_gae(r, t.traj_ids, t.values, gamma=c.gamma, lam=c.lam)[1],
}
"""The estimators with a learned turn-level critic (``credit.critic``): ``(cfg, turn_rewards, CreditInput)
-> [N]`` regression targets of V(s_t) (ARPO: the trajectory's outcome; Turn-PPO: the GAE returns)."""

CREDIT_STEP_SCORES: frozenset[str] = frozenset({"steppo"})
"""The estimators that read the environment's step scores (a process checklist on intermediate states)."""


def credit_estimator(credit_cfg) -> Callable[..., torch.Tensor]:
    return CREDIT_ESTIMATORS[credit_cfg.type]


def credit_critic_targets(credit_cfg) -> Callable[..., torch.Tensor] | None:
    """The critic's target function of an estimator with a learned critic (None: no critic)."""
    return CREDIT_CRITIC_TARGETS.get(credit_cfg.type)


def credit_needs_step_scores(credit_cfg) -> bool:
    return credit_cfg.type in CREDIT_STEP_SCORES


# ---------------------------------------------------------------------------------- preference


@dataclass(frozen=True)
class PreferenceVariant:
    """One DPO-family loss.

    ``pair_loss(cfg, pc, pr, rc, rr, lc, lr, smoothing) -> (per_pair [m], metrics)`` over summed
    policy (p*) and reference (r*) log-probabilities of chosen/rejected and their lengths; for an
    unpaired loss (KTO) it only scores held-out pairs. ``needs_reference``: reads reference logprobs.
    ``unpaired``: trains on single labelled examples instead of pairs.
    """

    pair_loss: Callable[..., tuple[torch.Tensor, dict]]
    needs_reference: bool = True
    unpaired: bool = False


def _dpo(c, pc, pr, rc, rr, lc, lr, sm):
    ls = torch.clamp(sm, min=c.label_smoothing) if c.label_smoothing or bool(sm.any()) else 0.0
    return pl.dpo(pc, pr, rc, rr, c.beta, label_smoothing=ls)


def _per_token(x, n):
    return x / n.to(x.dtype).clamp(min=1)


PREFERENCE_VARIANTS: dict[str, PreferenceVariant] = {
    "dpo": PreferenceVariant(_dpo),
    "ipo": PreferenceVariant(lambda c, pc, pr, rc, rr, lc, lr, sm: pl.ipo(pc, pr, rc, rr, c.beta, lc, lr)),
    # KTO trains on unpaired examples; on held-out pairs it is scored by its implicit reward beta*log-ratio
    "kto": PreferenceVariant(lambda c, pc, pr, rc, rr, lc, lr, sm: pl.dpo(pc, pr, rc, rr, c.beta), unpaired=True),
    "simpo": PreferenceVariant(
        lambda c, pc, pr, rc, rr, lc, lr, sm: pl.simpo(pc, pr, lc, lr, c.beta, c.gamma, label_smoothing=sm),
        needs_reference=False),
    "orpo": PreferenceVariant(
        lambda c, pc, pr, rc, rr, lc, lr, sm: pl.orpo(-_per_token(pc, lc), _per_token(pc, lc), _per_token(pr, lr),
                                                      c.lam),
        needs_reference=False),
    "cpo": PreferenceVariant(
        lambda c, pc, pr, rc, rr, lc, lr, sm: pl.cpo(pc, pr, -_per_token(pc, lc), c.beta, c.nll_weight,
                                                     label_smoothing=sm),
        needs_reference=False),
}


def preference_variant(loss_cfg) -> PreferenceVariant:
    return PREFERENCE_VARIANTS[loss_cfg.type]


# ---------------------------------------------------------------------------------- pair weights

UNI_DPO_TAU_GOOD = 0.5  # the calibrated NLL applies to chosen responses scored >= this (verifier: passed)


@dataclass(frozen=True)
class Weighting:
    """A per-pair weighting.

    ``weights(cfg, pc, pr, lc, lr, margin, fixed) -> [m]``; ``extra_loss(cfg, pc, rc, chosen_score) -> [m]``
    (summed into the loss, e.g. Uni-DPO's calibrated NLL) or None; ``dataset_level``: the weights come
    from the whole dataset at once (RGPO's EM over votes, which may also swap a pair), ``paired_only``:
    the weighting only makes sense for pairs (not for KTO's unpaired examples).
    """

    weights: Callable[..., torch.Tensor]
    extra_loss: Callable[..., torch.Tensor] | None = None
    dataset_level: bool = False
    paired_only: bool = True


def _uni_weights(w, pc, pr, lc, lr, margin, fixed):
    policy_margin = pc.detach() / lc.clamp(min=1) - pr.detach() / lr.clamp(min=1)
    return uni_dpo_weights(margin, policy_margin, w.perf_beta, w.eta, w.tau_ref, w.focal_gamma)


def _uni_nll(w, pc, rc, chosen_score):
    if w.nll_lambda <= 0:
        return None
    return uni_dpo_calibrated_nll(pc, rc, chosen_score, UNI_DPO_TAU_GOOD, w.nll_lambda)


WEIGHTINGS: dict[str, Weighting] = {
    "none": Weighting(lambda w, pc, *a: torch.ones_like(pc.detach()), paired_only=False),
    "uni_dpo": Weighting(_uni_weights, extra_loss=_uni_nll),
    "rgpo": Weighting(lambda w, pc, pr, lc, lr, margin, fixed: fixed, dataset_level=True),
}


def weighting(wcfg) -> Weighting:
    return WEIGHTINGS[wcfg.type]


def check_preference_combination(stage) -> str | None:
    """Why the stage's loss and weighting cannot go together (None when they can)."""
    if preference_variant(stage.loss).unpaired and weighting(stage.weighting).paired_only:
        return (f"weighting {stage.weighting.type!r} weights pairs, but loss {stage.loss.type!r} trains on "
                "unpaired examples; use weighting: {type: none}")
    return None
