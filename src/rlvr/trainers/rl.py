"""RL with verifiable rewards: the GRPO family (GRPO, DAPO, GSPO, Dr.GRPO, RLOO, REINFORCE++).

Reads top to bottom: setup -> rollout (G samples per task, one batched generate; dynamic sampling
draws more until the batch is informative) -> verify -> rewards -> advantages (the variant's
estimator, see ``trainers/variants.py``) -> update (μ epochs × mini-batches of the clipped surrogate
(+KL, +entropy) with exact accumulation; zero-advantage sequences get no backward) -> log ->
checkpoint. Every random draw is seeded by (seed, step), so a resumed run reproduces the
uninterrupted one.

Sequences whose advantage is exactly zero are never forwarded when nothing else (KL, entropy) needs
them — a speed-up only: they still count in the loss's denominators (token-mean: their tokens;
seq-mean: their rows; Dr.GRPO: their rows in the constant), so the gradient is exactly the one of the
whole batch, whatever the fraction of zero-variance groups and whether a KL term forces them in.
DAPO's dynamic sampling is the exception by definition: its batch *is* the informative groups.

Decisions (each tested in tests/unit/trainers/test_rl_decisions.py): the sampling temperature is > 0
(config error otherwise: training divides by it); the mini-batch shuffle is seeded by (seed, step, epoch);
DAPO defaults to soft overlong punishment (an ``overlong`` reward term, buffer max_new_tokens // 5) and to
dynamic sampling on correctness, as in the paper's final recipe; both are options of every variant. Off-policy updates (μ > 1 or several mini-batches)
recompute ``old_logprobs`` with the training forward; ``rollout/logprob_mismatch_{mean,max}`` report
the sampler-vs-trainer gap.
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from rlvr import hooks
from rlvr.advantages import zero_variance_groups
from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig
from rlvr.config.rl import RLStage
from rlvr.data.chat import check_prompt_lengths
from rlvr.data.collate import TrainBatch, micro_token_budget, pad_batch, plan_micro_batches, split_overhead
from rlvr.data.order import TaskStream
from rlvr.data.sources import load_task_source
from rlvr.losses.aggregate import aggregate, global_counts
from rlvr.losses.kl import kl_penalty
from rlvr.losses.mismatch import mismatch_metrics, mismatch_sums
from rlvr.models.load import load_pretrained
from rlvr.models.logprobs import token_logprobs
from rlvr.models.truncation import NONE as NO_TRUNCATION
from rlvr.models.truncation import Truncation
from rlvr.monitoring.health_actions import apply_knobs, rl_knobs
from rlvr.monitoring.screen import sampled_entropy
from rlvr.monitoring.sinks import log_samples
from rlvr.monitoring.heldout_guard import TestGuard
from rlvr.rollout.collector import Rollouts
from rlvr.rollout.methods import collect_with_methods, row_advantages, teacher_residuals
from rlvr.rollout.model_judge import with_model_judges
from rlvr.trainers.agent import AgentRollout
from rlvr.trainers.common import (
    StageResult,
    accumulate,
    build_optimizer,
    close_stage,
    find_checkpoint,
    frozen_reference,
    load_policy,
    log_step,
    logprob_mismatch,
    open_stage,
    optimizer_step,
    pause_on_infra,
    reference_model,
)
from rlvr.trainers.parallel import LOCAL, reduce_metrics
from rlvr.trainers.variants import PolicyInputs, policy_loss, rl_variant
from rlvr.verifiers.judge import reward_judge

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------- rollout


def rollout_step(stage: RLStage, engine, tok, stream: TaskStream, judge, seed: int, step: int, notes: list,
                 model=None, guard: TestGuard | None = None):
    """One rollout batch; with dynamic sampling, keep drawing until the batch is informative.

    A group is informative when its verifier outcomes are mixed (``sampling.dynamic_sampling: correct``,
    DAPO's 0 < #correct < G; DAPO's default) or its composed reward varies (``reward``). With dynamic sampling the
    batch *is* the informative groups (DAPO's definition, Yu et al. 2025, eq. 11: the token-mean runs over
    the kept groups only): filtered groups count in no loss denominator, unlike the zero-advantage rows of
    the other algorithms, which are skipped for speed but counted. With held-out code tests (``guard``) the
    verifier sees each task's training pool only.
    """
    dyn = stage.sampling.dynamic_sampling
    parts, kept, drawn, rnd = [], 0, 0, 0
    while True:
        tasks = stream.take(stage.tasks_per_step)
        if guard is not None:
            tasks = guard.training(tasks, step)
        ro, method_met = collect_with_methods(stage, engine, model, tok, tasks, judge, seed * 100003 + step * 97 + rnd,
                                              step)
        drawn += ro.num_groups
        if dyn in (None, "off"):
            return ro, {"rollout/groups_drawn": drawn, **method_met}
        signal = ro.passed.float() if dyn == "correct" else ro.rewards
        zv = zero_variance_groups(signal, ro.valid)
        keep = [g for g in range(ro.num_groups) if not zv[g]][: stage.tasks_per_step - kept]
        parts.append(ro.select_groups(keep))
        kept += len(keep)
        rnd += 1
        if kept >= stage.tasks_per_step or rnd > stage.sampling.max_resample_rounds:
            break
    if kept < stage.tasks_per_step:
        rate = float(ro.passed.float().mean())
        hint = "too easy" if rate > 0.5 else "too hard"
        notes.append(f"step {step}: dynamic sampling found {kept}/{stage.tasks_per_step} informative groups after "
                     f"{rnd} rounds (pass rate {rate:.0%}: the data looks {hint} for this policy)")
    merged = Rollouts.concat(parts) if kept else ro.select_groups([])
    return merged, {"rollout/groups_drawn": drawn, "rollout/resample_rounds": rnd, **method_met}


def tracks_kl(health) -> bool:
    """Measure KL to the reference at β = 0 too: asked for, or an ``adaptive_beta`` action may start β."""
    if health.track_kl is not None:
        return health.track_kl
    return any("adaptive_beta" in getattr(health.actions, r) for r in type(health.actions).model_fields)


def reward_length_corr(rewards: torch.Tensor, lens: torch.Tensor) -> float:
    """Pearson correlation of the batch's rewards and completion lengths (0 when either is constant)."""
    r, n = rewards.reshape(-1).float(), lens.reshape(-1).float()
    if r.numel() < 2 or r.std() == 0 or n.std() == 0:
        return 0.0
    return float(torch.corrcoef(torch.stack([r, n]))[0, 1])


def rollout_metrics(ro: Rollouts, zv: torch.Tensor) -> dict:
    lens = torch.tensor([len(c) for c in ro.completion_ids], dtype=torch.float32)
    m = {"rollout/pass_rate": float(ro.passed.float().mean()) if ro.num_groups else 0.0,
         "reward/mean": float(ro.rewards.mean()) if ro.num_groups else 0.0,
         "reward/std": float(ro.rewards.std()) if ro.rewards.numel() > 1 else 0.0,
         "rollout/zero_var_frac": float(zv.float().mean()) if ro.num_groups else 1.0,
         "rollout/length_mean": float(lens.mean()) if len(lens) else 0.0,
         "rollout/length_max": float(lens.max()) if len(lens) else 0.0,
         "rollout/truncation_rate": float(np.mean([r == "length" for r in ro.finish_reason])) if lens.numel() else 0.0,
         "rollout/reward_length_corr": reward_length_corr(ro.rewards, lens) if ro.num_groups else 0.0,
         **sampled_entropy(ro.old_logprobs),
         "verifier/infra": int((~ro.valid).sum())}
    for k, v in ro.reward_terms.items():
        m[f"reward/{k}"] = float(v.mean()) if v.numel() else 0.0
    for o in set(ro.outcomes):
        m[f"verifier/{o}"] = ro.outcomes.count(o)
    return m


# ------------------------------------------------------------------------------------------ batch


def needs_every_row(stage: RLStage, variant) -> bool:
    """Whether zero-advantage rows must be forwarded: a KL term on every row (``kl.rows: all``), an entropy
    bonus, or a loss in which a zero advantage still has a gradient."""
    kl_all = stage.kl.beta > 0 and stage.kl.rows == "all"
    return kl_all or stage.entropy_coef != 0 or variant.trains_zero_advantage


def build_train_batch(ro, advantages: torch.Tensor, needs_all: bool, mask_truncated: bool) -> TrainBatch:
    """Flatten rollouts into training rows (``advantages``: ``[n, G]``, or per row a float or a list over its
    completion tokens, see ``rollout.methods.row_advantages``). Zero-advantage rows are not forwarded unless ``needs_all``
    (KL or entropy terms give them a gradient) but still counted; invalid (infrastructure) verdicts,
    empty completions and, with ``mask_truncated``, truncated ones are not part of the loss at all."""
    adv = advantages.reshape(-1).tolist() if isinstance(advantages, torch.Tensor) else advantages
    valid = ro.valid.reshape(-1).tolist()
    rows = TrainBatch([], [], [], None, [])
    for i, (p, c) in enumerate(zip(ro.prompt_ids, ro.completion_ids)):
        if not valid[i] or not c or (mask_truncated and ro.finish_reason[i] == "length"):
            continue
        mask = [0] * len(p) + [1] * len(c)
        per_token = isinstance(adv[i], list)
        if not needs_all and (all(a == 0.0 for a in adv[i]) if per_token else adv[i] == 0.0):
            rows.skipped_masks.append(mask)
            continue
        rows.input_ids.append(p + c)
        rows.loss_mask.append(mask)
        rows.old_logprobs.append([0.0] * len(p) + list(ro.old_logprobs[i]))
        rows.advantages.append([0.0] * len(p) + list(adv[i]) if per_token else adv[i])
    return rows


def update_micro_batches(model, batch: TrainBatch, rows: list[int], micro: int,
                         micro_tokens: int | str | None = "auto") -> list[list[int]]:
    """The micro-batches (as row ids of ``batch``) that :func:`update_minibatch` forwards for the
    mini-batch ``batch.subset(rows)`` (``micro_tokens``: ``model.micro_tokens``, see ``micro_token_budget``)."""
    fwd = [i for i in rows if i < len(batch)]
    prompts = [tuple(batch.input_ids[i][:batch.loss_mask[i].index(1)]) if 1 in batch.loss_mask[i] else i
               for i in fwd]  # keep a group's rows together: the packed forward shares their prompt
    packed = hooks.packed_forward(model)
    plan = plan_micro_batches([len(batch.input_ids[i]) for i in fwd], micro, split_overhead(model, packed),
                              micro_token_budget(model, micro_tokens), prompts,
                              [len(p) if isinstance(p, tuple) else 0 for p in prompts] if packed else None)
    return [[fwd[k] for k in m] for m in plan]


def first_update_micros(model, batch: TrainBatch, first_minibatches: list[list[int]], micro: int,
                        micro_tokens: int | str | None = "auto"):
    """The micro-batches (row ids) of the first epoch's updates, mini-batch after mini-batch."""
    return [m for rows in first_minibatches for m in update_micro_batches(model, batch, rows, micro, micro_tokens)]


def minibatch_rows(n: int, mini_batches: int, epochs: int, seed: int, step: int) -> list[list[list[int]]]:
    """Per epoch, its mini-batches (row ids): a permutation of the ``n`` rows seeded by (seed, step, epoch),
    cut into ``mini_batches`` consecutive slices."""
    size = -(-n // mini_batches)
    orders = [np.random.default_rng([seed, step, epoch]).permutation(n).tolist() for epoch in range(epochs)]
    return [[order[s:s + size] for s in range(0, n, size)] for order in orders]


@torch.no_grad()
def forward_logprobs(model, batch: TrainBatch, pad_id: int, temperature: float, micro: int, bf16: bool,
                     micros: list[list[int]] | None = None, truncation: Truncation = NO_TRUNCATION,
                     micro_tokens: int | str | None = "auto"):
    """Per forwarded row, its logprobs under ``model`` (no grad), with the update's temperature, truncation
    (top-k / top-p) and precision, over ``micros`` (row ids; default: the length-sorted plan of all rows)."""
    out: list = [None] * len(batch)
    if micros is None:
        micros = update_micro_batches(model, batch, list(range(len(batch))), micro, micro_tokens)
    with hooks.reuse_weights():
        for rows in micros:
            ids, att, lm = pad_batch([batch.input_ids[i] for i in rows], pad_id, [batch.loss_mask[i] for i in rows],
                                     left=False, device=model.device)
            lp, _ = token_logprobs(model, ids, att, temperature, bf16=bf16, wanted=lm, truncation=truncation)
            for k, i in enumerate(rows):
                out[i] = lp[k, : len(batch.input_ids[i])].tolist()
    return out


def reference_logprobs(ref_model, policy, batch: TrainBatch, pad_id: int, temperature: float, micro: int,
                       bf16: bool = False, micros: list[list[int]] | None = None,
                       truncation: Truncation = NO_TRUNCATION):
    """Frozen-reference logprobs, computed once per rollout batch in the policy's precision and truncation
    (LoRA: the policy with adapters disabled) and, given ``micros``, on the first updates' micro-batches, so
    that KL is exactly 0 while the policy is still the reference."""
    with reference_model(policy, ref_model) as model:
        return forward_logprobs(model, batch, pad_id, temperature, micro, bf16, micros, truncation)


def recompute_old_logprobs(model, batch: TrainBatch, cfg, pad_id: int, bf16: bool,
                           micros: list[list[int]] | None = None, micro_tokens: int | str | None = "auto") -> dict:
    """Replace the sampler's ``old_logprobs`` by the training forward's (no grad), for updates that are
    not on-policy (μ > 1 or several mini-batches): the ratio then starts at exactly 1 instead of at the
    sampler/trainer numerical gap (4-8e-3 a token in bf16, enough to clip GSPO's 3e-4 sequence range). The
    engine's logprobs move to ``batch.sampler_logprobs``, where the mismatch correction reads them.
    An asynchronous trainer, whose samples come from older weights, must keep the sampler's logprobs:
    they are the behaviour policy's. The rows are forwarded in the micro-batches the first epoch's updates
    will use (``micros``, see :func:`first_update_micros`), so even shape-dependent GPU kernels give their
    values bit for bit. Returns the sampler-vs-trainer mismatch metrics."""
    lps = forward_logprobs(model, batch, pad_id, cfg.sampling.temperature, cfg.micro_batch_size, bf16, micros,
                           Truncation.of(cfg.sampling), micro_tokens)
    met = logprob_mismatch(lps, batch.old_logprobs, batch.loss_mask)
    if batch.sampler_logprobs is None:  # the engine's stay beside π_old: the mismatch correction compares them
        batch.sampler_logprobs = batch.old_logprobs
    batch.old_logprobs = [[lp if m else 0.0 for lp, m in zip(row, mask)] for row, mask in zip(lps, batch.loss_mask)]
    return met


# ----------------------------------------------------------------------------------------- update


def micro_loss(model, mb: TrainBatch, cfg, counts_kw: dict, pad_id: int, on_policy: bool, bf16: bool = False):
    """Loss of one micro-batch, already divided by the mini-batch's global denominator."""
    b = mb.tokens(pad_id, device=model.device)
    ids, att, lm, old = b.input_ids, b.attention_mask, b.loss_mask, b.old_logprobs
    # the engine's logprobs of the sampled tokens: kept apart when old_logprobs were recomputed (off-policy)
    sampler = b.sampler_logprobs if b.sampler_logprobs is not None else b.old_logprobs
    logprobs, entropy = token_logprobs(model, ids, att, cfg.sampling.temperature, with_entropy=True,
                                       bf16=bf16, entropy_grad=bool(cfg.entropy_coef), wanted=lm,
                                       truncation=Truncation.of(cfg.sampling))
    gap_metrics = {}
    if on_policy:  # old = the forward itself (ratio exactly 1); the sampler's logprobs only measure the gap
        gap = torch.where(lm.bool(), (logprobs.detach() - old).abs(), torch.zeros_like(old))
        gap_metrics = {"rollout/logprob_mismatch_sum": float(gap.sum()),
                       "rollout/logprob_mismatch_max": float(gap.max())}
        old = logprobs.detach()
    per_tok, metrics = policy_loss(cfg.loss, PolicyInputs(logprobs, old, b.advantages, lm, entropy, b.ref_logprobs))
    metrics.update(gap_metrics)
    if cfg.correction.enabled:  # sampler/trainer mismatch: truncated IS + geometric-mean sequence mask
        c = cfg.correction
        weights, mm = mismatch_sums(old, sampler, lm, c.tis_cap, c.seq_low, c.seq_high)
        per_tok = per_tok * weights
        metrics.update(mm)
    if b.ref_logprobs is not None:  # β > 0, or KL measured for the health monitor (no gradient at β = 0)
        kl = kl_penalty(logprobs if cfg.kl.beta > 0 else logprobs.detach(), b.ref_logprobs,
                        kind=cfg.kl.estimator, loss_mask=lm)
        if cfg.kl.beta > 0:
            per_tok = per_tok + cfg.kl.beta * kl
        metrics["kl/ref"] = float((kl.detach() * lm).sum() / lm.sum().clamp(min=1))
    if cfg.entropy_coef:
        per_tok = per_tok - cfg.entropy_coef * entropy
    loss = aggregate(per_tok, lm, cfg.loss.aggregation, **counts_kw)
    metrics["policy/entropy_sum"] = float((entropy.detach() * lm).sum())
    metrics["policy/tokens_sum"] = float(lm.sum())
    return loss, metrics


def update_minibatch(model, batch: TrainBatch, cfg, pad_id: int, on_policy: bool, bf16: bool = False,
                     dist=LOCAL, micro_tokens: int | str | None = "auto") -> dict:
    """Forward/backward a mini-batch's forwarded rows in length-sorted micro-batches (see
    plan_micro_batches); every micro-batch divides by the denominators of all the mini-batch's rows,
    skipped ones included: exact gradients.

    With several processes (``dist``; every one holds the whole batch) each forwards its share of the
    rows, divides by the whole mini-batch's denominators, and the gradients are summed across processes."""
    total = len(batch)
    counts = global_counts(torch.tensor([m], dtype=torch.float32) for m in batch.loss_mask + batch.skipped_masks)
    batch = batch.subset(dist.shard([len(s) for s in batch.input_ids]))
    micros = update_micro_batches(model, batch, list(range(len(batch))), cfg.micro_batch_size, micro_tokens)
    norm_len = cfg.sampling.max_new_tokens if cfg.loss.aggregation == "seq-mean-token-sum-norm" else None
    kw = counts.overrides(cfg.loss.aggregation, norm_len=norm_len)
    met = accumulate(micros, lambda m: micro_loss(model, batch.subset(m), cfg, kw, pad_id, on_policy, bf16), total)
    dist.reduce_grads(model)
    return reduce_metrics(met, dist)


MASKED_WARN_FRAC = 0.05
"""A step whose mismatch correction masks more than this share of its sequences logs a warning: masked rows
train on nothing (they stay in the loss normaliser), so the step's effective learning rate shrinks by it."""


def warn_masked(frac: float, correction) -> None:
    """Warn when the sequence band masks more than :data:`MASKED_WARN_FRAC` of a step's sequences."""
    if frac > MASKED_WARN_FRAC:
        log.warning("mismatch correction masked %.1f%% of this step's sequences (geometric-mean ratio outside "
                    "[%g, %g]): they train on nothing. A sampler/trainer gap this large is more than float "
                    "rounding: check that both run at the precision and top-p / top-k you expect (docs/scaling.md)",
                    100 * frac, correction.seq_low, correction.seq_high)


def policy_update(model, opt, sched, stage: RLStage, batch, pad_id: int, bf16: bool, seed: int = 0,
                  step: int = 0, dist=LOCAL, stale: bool = False, micro_tokens: int | str | None = "auto") -> dict:
    """μ epochs over the batch in ``mini_batches`` optimizer steps; returns averaged metrics.
    ``micro_tokens``: the recipe's ``model.micro_tokens`` (each micro-batch's token budget).

    ``stale``: the batch was sampled by older weights (asynchronous rollouts): the ratio is taken against
    the sampler's logprobs (the behaviour policy), which are then never recomputed.

    Unless the update is on-policy (μ = 1, one mini-batch: the ratio is the forward's own, exactly 1),
    ``old_logprobs`` are first recomputed by the training forward (see ``recompute_old_logprobs``).
    Mini-batches (see :func:`minibatch_rows`) are cut from all the batch's rows, skipped zero-advantage
    ones included (they count in each mini-batch's denominators); a mini-batch with nothing to forward
    takes no optimizer step (its gradient is 0, and AdamW momentum alone must not move the weights).
    """
    if len(batch) == 0:
        with warnings.catch_warnings():  # no optimizer step: AdamW momentum must not move the weights
            warnings.simplefilter("ignore", UserWarning)
            sched.step()
        return {"train/sequences": 0}
    on_policy = stage.ppo_epochs == 1 and stage.mini_batches == 1 and not stale
    minis = minibatch_rows(batch.num_rows, stage.mini_batches, stage.ppo_epochs, seed, step)
    mismatch = {}
    if not on_policy and not stale:
        micros = first_update_micros(model, batch, minis[0], stage.micro_batch_size, micro_tokens)
        mismatch = recompute_old_logprobs(model, batch, stage, pad_id, bf16, micros, micro_tokens)
    out: dict = {}
    corr: dict = {}
    n_updates = 0
    for epoch_minis in minis:
        for rows in epoch_minis:
            mini = batch.subset(rows)
            if len(mini) == 0:
                continue
            met = update_minibatch(model, mini, stage, pad_id, on_policy, bf16, dist, micro_tokens)
            met["train/grad_norm"] = optimizer_step(model, opt, None, stage.optim.max_grad_norm, met.get("train/loss"))
            n_updates += 1
            for k, v in met.items():
                if k.startswith("mismatch/"):  # sums and counts over every update (a max: its max)
                    corr[k] = max(corr.get(k, v), v) if k.endswith("max") else corr.get(k, 0.0) + v
                else:
                    out[k] = out.get(k, 0.0) + v
    sched.step()
    ent_sum, toks = out.pop("policy/entropy_sum", 0.0), out.pop("policy/tokens_sum", 0.0)
    gap_sum = out.pop("rollout/logprob_mismatch_sum", None)  # on-policy: measured by the one update
    res = {k: v / n_updates for k, v in out.items()}
    res["policy/entropy"] = ent_sum / max(toks, 1.0)
    if gap_sum is not None:
        mismatch = {"rollout/logprob_mismatch_mean": gap_sum / max(toks, 1.0),
                    "rollout/logprob_mismatch_max": res.pop("rollout/logprob_mismatch_max")}
    res.update(mismatch)
    if corr:
        res.update(mismatch_metrics(corr))
        warn_masked(res["mismatch/seq_masked_frac"], stage.correction)
    res["train/sequences"] = len(batch)
    res["train/rows_counted"] = batch.num_rows
    res["train/updates"] = n_updates
    return res


# ---------------------------------------------------------------------------------------- trainer


def train_rl(stage: RLStage, model_cfg: ModelConfig, run_dir: str | Path, seed: int = 0,
             init_path: str | None = None, resume: bool = False, eval_cfg: EvalConfig | None = None,
             judge=None, crash_at_step: int | None = None, dist=None) -> StageResult:
    """Run a GRPO-family stage; returns where its final checkpoint is. ``dist``: where rollouts,
    verification and training run (a :class:`~rlvr.trainers.parallel.DistContext`; default this process)."""
    dist = dist or LOCAL
    out, model, tok = load_policy(run_dir, stage.name, model_cfg, init_path, seed)
    variant = rl_variant(stage.loss)
    track_kl = stage.kl.beta > 0 or variant.needs_reference or tracks_kl(stage.health)
    ref = frozen_reference(model, track_kl, model_cfg.train_bf16)
    eval_override = judge  # held-out evaluation judges with the evaluation's scoring, not the training reward
    judge = dist.wrap_judge(with_model_judges(judge or reward_judge(stage.rewards, stage.verifier_workers),
                                              stage.rewards, tok))
    engine = dist.engine(model, tok, bf16=model_cfg.decode_bf16)
    agent = AgentRollout(stage, engine, tok, model) if stage.rollout.mode == "multi_turn" else None
    stream = TaskStream(load_task_source(stage.data), seed)
    if agent is None:
        check_prompt_lengths(stream.tasks, tok, model, stage.sampling.max_new_tokens, f"stage {stage.name}: data")
    opt, sched = build_optimizer(model, stage.optim, stage.max_steps)
    run = open_stage(stage, out, model, tok, opt, sched, stage.max_steps, checkpoint=find_checkpoint(out, resume),
                     eval_cfg=eval_cfg, judge=eval_override, health=stage.health, crash_at_step=crash_at_step,
                     label="rl", dist=dist, knobs=rl_knobs(stage))
    stream.cursor = run.state.get("cursor", 0)
    if agent is not None:
        agent.load_state_dict(run.state)  # the turn-level critic of ARPO / Turn-PPO
    dist.publish(model, run.step)
    mask_trunc = stage.loss.mask_truncated
    notes: list[str] = []
    base = stage
    guard = TestGuard(stage.health.code_tests, seed) if stage.health.code_tests.heldout_frac else None
    make = lambda k: (*rollout_step(stage, engine, tok, stream, judge, seed, k, notes, model, guard), stream.cursor)
    teacher = load_pretrained(stage.residual.teacher)[0].to(model.device).eval() if stage.residual.enabled else None
    while not run.done():
        stage = apply_knobs(base, run.health.knobs) if run.health is not None else base  # health actions
        needs_all = needs_every_row(stage, variant)
        ro, stale = None, 0
        if agent is not None:  # multi-turn closed loop (trainers/agent.py)
            batch, ro_rec = agent.step(stream, seed, run.step, needs_all, stage)
            cursor = stream.cursor
        else:
            ro, extra, cursor = dist.rollouts(make, run.step)
            stale = max((run.step - v for v in ro.policy_version), default=0)
            zv = zero_variance_groups(ro.rewards, ro.valid) if ro.num_groups else torch.zeros(0, dtype=torch.bool)
            adv = variant.advantages(stage.loss, ro.rewards, ro.valid) if ro.num_groups else torch.zeros(0, 1)
            res = teacher_residuals(model, teacher, ro, tok.pad_token_id, stage.sampling.temperature) \
                if teacher is not None else None
            batch = build_train_batch(ro, row_advantages(ro, adv, res, stage.residual.weight), needs_all, mask_trunc)
            ro_rec = {**rollout_metrics(ro, zv), **extra, "time/generate": ro.seconds.get("generate", 0.0),
                      "time/verify": ro.seconds.get("verify", 0.0), "rollout/staleness": stale,
                      **(guard.measure(ro, judge) if guard is not None else {})}
        pause_on_infra(run, ro_rec, ro.valid.numel() if ro is not None else
                       stage.tasks_per_step * stage.sampling.group_size, ro.reward_errors if ro is not None else [])
        if track_kl and len(batch):
            first = minibatch_rows(batch.num_rows, stage.mini_batches, 1, seed, run.step)[0]
            batch.ref_logprobs = reference_logprobs(
                ref, model, batch, tok.pad_token_id, stage.sampling.temperature, stage.micro_batch_size,
                model_cfg.train_bf16,
                first_update_micros(model, batch, first, stage.micro_batch_size, model_cfg.micro_tokens),
                Truncation.of(stage.sampling))
        t0 = time.perf_counter()
        met = policy_update(model, opt, sched, stage, batch, tok.pad_token_id, model_cfg.train_bf16, seed,
                            run.step, dist, stale > 0, model_cfg.micro_tokens)
        dist.publish(model, run.step + 1)
        rec = {**ro_rec, **met, "time/train": time.perf_counter() - t0, **dist.step_metrics()}
        if notes:
            rec["notes"] = notes.pop()
        stop = log_step(run, rec, {"cursor": cursor, **(agent.state_dict() if agent is not None else {})},
                        ids=[t.id for t in ro.tasks] if ro is not None else None,
                        info=f"pass {rec['rollout/pass_rate']:.2f} zero-var {rec['rollout/zero_var_frac']:.2f}")
        if ro is not None:
            log_samples(run.step, ro)  # sample completions with their verdicts (logging.samples_every)
        if stop:
            break
    result = close_stage(run)
    if agent is not None and dist.is_main:
        agent.save(result.checkpoint)
    return result
