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

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rlvr import advantages as adv
from rlvr.advantages.corrections import asymmetric, sign_balance
from rlvr.advantages.credit import hgpo_credit, trajectory_credit, turn_discounted_credit
from rlvr.advantages.turn_credit import arpo_credit, outcome_targets, steppo_credit, turn_gae, turn_ppo_credit
from rlvr.losses import policy_variants as pv
from rlvr.losses import preference as pl
from rlvr.losses.pair_weights import uni_dpo_calibrated_nll, uni_dpo_weights
from rlvr.losses.policy import clipped_surrogate

# ------------------------------------------------------------------------------------------- RL


@dataclass(frozen=True)
class PolicyInputs:
    """What a policy loss may read, per micro-batch: all ``[B, T]``; only ``logprobs`` carries the gradient."""

    logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    loss_mask: torch.Tensor
    entropy: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None


@dataclass(frozen=True)
class RLVariant:
    """One GRPO-family algorithm.

    ``advantages(cfg, rewards [n, G], valid [n, G]) -> [n, G]``; ``clip(cfg) -> (eps_low, eps_high, level)``
    with level ``token`` (per-token ratio) or ``sequence`` (GSPO's length-normalised sequence ratio);
    ``group_baseline(cfg)``: the estimator compares samples within a group (a group of 1 trains on nothing).
    ``loss(cfg, PolicyInputs) -> (per_token [B, T], metrics)``: None is the clipped surrogate with ``clip``.

    Flags (read by the trainer and by ``check_rl_combination``, never by identity):
    ``needs_reference`` — the loss reads the frozen reference's logprobs (loaded even with kl.beta = 0);
    ``allows_kl`` — a KL penalty may be added (False: the loss regularises towards the reference itself);
    ``trains_zero_advantage`` — a zero-advantage sample still has a gradient (it cannot be skipped);
    ``per_token_advantages`` — the loss reads per-token advantages (False: one number per sequence, so
    methods that give tokens different advantages — residual advantage, off-context IS — do not apply).
    """

    advantages: Callable[..., torch.Tensor]
    clip: Callable[..., tuple[float, float, str]]
    group_baseline: Callable[..., bool] = lambda cfg: True
    loss: Callable[..., tuple[torch.Tensor, dict]] | None = None
    needs_reference: bool = False
    allows_kl: bool = True
    trains_zero_advantage: bool = False
    per_token_advantages: bool = True


def _symmetric(cfg) -> tuple[float, float, str]:
    return cfg.eps, cfg.eps, "token"


def _decoupled(level: str):
    return lambda cfg: (cfg.eps_low, cfg.eps_high, level)


def _grpo_group(c, r, v):
    return adv.grpo(r, scale="group", mask=v)


def _steer(c, x: PolicyInputs):
    per_tok, met = clipped_surrogate(x.logprobs, x.old_logprobs, x.advantages, x.loss_mask, c.eps, c.eps)
    binds = pv.clip_binds(x.logprobs, x.old_logprobs, x.advantages, c.eps, c.eps)
    w, wm = pv.steer_weights(x.logprobs.detach(), x.entropy, x.advantages, x.loss_mask, binds, c.tau)
    return per_tok * w, {**met, **wm}


RL_VARIANTS: dict[str, RLVariant] = {
    "grpo": RLVariant(lambda c, r, v: adv.grpo(r, scale=c.scale, mask=v), _symmetric),
    "dapo": RLVariant(_grpo_group, _decoupled("token")),
    "gspo": RLVariant(_grpo_group, _decoupled("sequence")),
    "dr_grpo": RLVariant(lambda c, r, v: adv.dr_grpo(r, mask=v), _symmetric),
    "rloo": RLVariant(lambda c, r, v: adv.rloo(r, mask=v), _symmetric),
    "reinforce_pp": RLVariant(
        lambda c, r, v: adv.reinforce_pp(r, baseline="group" if c.group_baseline else "none", mask=v), _symmetric,
        group_baseline=lambda c: c.group_baseline),
    "sign_balance": RLVariant(lambda c, r, v: sign_balance(r, mask=v, scale=c.scale), _symmetric),
    "asym_grpo": RLVariant(lambda c, r, v: asymmetric(_grpo_group(c, r, v), c.pos_weight, c.neg_weight), _symmetric),
    "steer": RLVariant(_grpo_group, _symmetric, loss=_steer),
    "cispo": RLVariant(_grpo_group, _decoupled("token"), loss=lambda c, x: pv.cispo(
        x.logprobs, x.old_logprobs, x.advantages, x.loss_mask, c.eps_low, c.eps_high)),
    "sapo": RLVariant(_grpo_group, lambda c: (0.0, 0.0, "token"), loss=lambda c, x: pv.sapo(
        x.logprobs, x.old_logprobs, x.advantages, x.loss_mask, c.tau_pos, c.tau_neg)),
    "dar": RLVariant(_grpo_group, lambda c: (0.0, 0.0, "token"), loss=lambda c, x: pv.dar(
        x.logprobs, x.ref_logprobs, x.old_logprobs, x.advantages, x.loss_mask, c.alpha, c.beta, c.max_weight),
        needs_reference=True, allows_kl=False, trains_zero_advantage=True, per_token_advantages=False),
}


def rl_variant(loss_cfg) -> RLVariant:
    return RL_VARIANTS[loss_cfg.type]


@dataclass(frozen=True)
class MethodFlags:
    """What an RL-stage method (``rlvr.config.methods``) requires of the rest of the stage.

    ``single_turn``: it changes single-turn rollouts; ``group_relative``: its samples only mean something
    through their group's baseline; ``per_token``: it gives the tokens of one sample different advantages;
    ``local_engine``: it samples from the trainer's own model with a change made to it (a forward hook), so
    only the in-process HF engine sees the change (Ray rollout workers and vLLM sample from their copies)."""

    single_turn: bool = True
    group_relative: bool = False
    per_token: bool = False
    local_engine: bool = False


RL_METHODS: dict[str, MethodFlags] = {
    "eden": MethodFlags(group_relative=True, local_engine=True),
    "off_context": MethodFlags(group_relative=True, per_token=True),
    "double_rollout": MethodFlags(),
    "guidance": MethodFlags(group_relative=True),
    "residual": MethodFlags(per_token=True),
}
"""RL-stage field name -> its flags; ``check_rl_combination`` reads them against the loss variant's flags."""


def check_rl_combination(stage, distributed=None) -> list[tuple[str, str]]:
    """``(key, why)`` for each option of an RL stage that cannot go with its loss variant, its rollout mode
    or the recipe's ``distributed`` section (a DistributedConfig; None: not checked)."""
    v, t = rl_variant(stage.loss), stage.loss.type
    out = []
    if stage.kl.beta > 0 and not v.allows_kl:
        out.append(("kl.beta", f"loss {t!r} regularises towards the reference inside its own objective; a KL "
                               "penalty on top counts it twice: set kl.beta: 0"))
    for name, flags in RL_METHODS.items():
        if not getattr(stage, name).enabled:
            continue
        if flags.single_turn and stage.rollout.closed_loop:
            out.append((f"{name}.enabled", f"{name} changes single-turn rollouts; rollout.mode is multi_turn"))
        if flags.group_relative and not v.group_baseline(stage.loss):
            out.append((f"{name}.enabled", f"{name}'s samples are scored against their group, but loss {t!r} has "
                                           "no group baseline here"))
        if flags.local_engine and distributed is not None and (distributed.engine, distributed.backend) != ("hf", "local"):
            out.append((f"{name}.enabled", f"{name} changes the trainer's own model while it samples; with "
                                           f"distributed.engine {distributed.engine!r} / backend "
                                           f"{distributed.backend!r} the samples come from another copy, which "
                                           "would not see it: use engine hf, backend local (or torchrun)"))
        if flags.per_token and not v.per_token_advantages:
            out.append((f"{name}.enabled", f"{name} gives the tokens of a sample different advantages, but loss "
                                           f"{t!r} weights each sequence by one advantage"))
    G = stage.sampling.group_size
    taken = (max(1, round(stage.eden.fraction * G)) if stage.eden.enabled else 0) + \
        (stage.guidance.demos_per_group if stage.guidance.enabled else 0)
    if taken and G - taken < 1:
        out.append(("sampling.group_size", f"group_size {G} leaves no plain sample once EDEN and guidance take "
                                           f"{taken} of each group"))
    if stage.rollout.closed_loop:
        out += multi_turn_refusals(stage, distributed)
    for j, term in enumerate(stage.rewards):
        if term.name == "checklist" and getattr(stage.data, "type", None) != "builtin":
            out.append((f"rewards.{j}.name", "the checklist reward checks built-in arithmetic worked steps; "
                                             f"data is {getattr(stage.data, 'type', '?')!r}"))
    return out


def multi_turn_refusals(stage, distributed=None) -> list[tuple[str, str]]:
    """``(key, why)`` for each setting of a multi-turn stage that the closed loop does not read: the loop's
    own limits (``rollout.loop``) replace the single-turn generation budget and stop strings, the
    environment is the verifier (no worker pool, no held-out code tests), and it trains on every group
    (no dynamic sampling, so no ``dynamic_sampling`` health action)."""
    from rlvr.config.rl import SamplingConfig

    out = []
    loop = "rollout.loop"
    ignored = {"max_new_tokens": f"the closed loop's turn budget is {loop}.max_new_tokens",
               "stop": "a turn ends at the chat template's end-of-turn token",
               "max_resample_rounds": "it belongs to dynamic sampling, which the closed loop does not run",
               "row_seeds": "the closed loop seeds each turn's samples by (seed, step, turn)",
               "decode_threads": "the closed loop decodes on torch's thread setting"}
    for name, why in ignored.items():
        if getattr(stage.sampling, name) != SamplingConfig.model_fields[name].default:
            out.append((f"sampling.{name}", f"not read by a multi_turn stage: {why}"))
    if stage.verifier_workers:
        out.append(("verifier_workers", "not read by a multi_turn stage: the environment's end-state predicate "
                                        "is the verifier, run in the loop"))
    if stage.health.code_tests.heldout_frac not in (0, type(stage.health.code_tests)().heldout_frac):  # not the default
        out.append(("health.code_tests.heldout_frac", "held-out code tests check single-turn code completions; a "
                                                      "multi_turn stage is judged on the environment's end state"))
    for rule in type(stage.health.actions).model_fields:
        if "dynamic_sampling" in getattr(stage.health.actions, rule):
            out.append((f"health.actions.{rule}", "dynamic_sampling cannot act in a multi_turn stage (the closed "
                                                  "loop trains on every group); use grow_group or raise_temperature"))
    if distributed is not None and distributed.max_staleness:
        out.append(("rollout.mode", f"distributed.max_staleness {distributed.max_staleness}: asynchronous rollouts "
                                    "prefetch single-turn batches; a multi_turn stage samples each step's "
                                    "trajectories with the current weights (set max_staleness: 0)"))
    return out


def policy_loss(loss_cfg, x: PolicyInputs) -> tuple[torch.Tensor, dict]:
    """The variant's per-token loss (the clipped surrogate with its clip range unless it has its own)."""
    v = rl_variant(loss_cfg)
    if v.loss is not None:
        return v.loss(loss_cfg, x)
    eps_low, eps_high, level = v.clip(loss_cfg)
    return clipped_surrogate(x.logprobs, x.old_logprobs, x.advantages, x.loss_mask, eps_low, eps_high, level=level)


# ------------------------------------------------------------------------------------------ SFT

SFT_VARIANTS: dict[str, Callable[..., dict]] = {
    "nll": lambda c: {},
    "trim": lambda c: {"trim_confidence": c.confidence},
}
"""``loss.type`` of an SFT stage -> the keyword arguments of ``rlvr.losses.sft.sft_loss`` it sets."""


def sft_loss_kwargs(loss_cfg) -> dict:
    return SFT_VARIANTS[loss_cfg.type](loss_cfg)


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
    "constrained_po": PreferenceVariant(
        lambda c, pc, pr, rc, rr, lc, lr, sm: pl.constrained_po(pc, pr, rc, rr, c.beta, c.weight, c.margin, sm)),
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
