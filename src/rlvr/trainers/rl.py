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
import warnings
from functools import partial
from pathlib import Path

import torch

from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig
from rlvr.config.rl import RLStage
from rlvr.data.collate import TokenBatch
from rlvr.data.order import TaskStream, minibatch_rows
from rlvr.data.sources import load_task_source
from rlvr.losses.aggregate import global_counts
from rlvr.losses.mismatch import mismatch_metrics
from rlvr.models.prefix_share import shared_prefixes
from rlvr.models.truncation import Truncation
from rlvr.monitoring.health_actions import apply_knobs, rl_knobs
from rlvr.monitoring.metrics import PhaseTimer
from rlvr.rollout.model_judge import with_model_judges
from rlvr.trainers.common import (
    StageResult,
    accumulate,
    build_optimizer,
    close_stage,
    find_checkpoint,
    frozen_reference,
    load_policy,
    log_step,
    open_stage,
    optimizer_step,
    pause_on_infra,
)
from rlvr.trainers.micro_loss import micro_batch_loss, micro_loss  # noqa: F401
from rlvr.trainers.parallel import LOCAL, reduce_metrics
from rlvr.trainers.sources import SourceSetup, build_train_batch, rollout_source, rollout_step  # noqa: F401
from rlvr.trainers.update import (  # noqa: F401 (the update engine, re-exported)
    first_update_micros,
    forward_logprobs,
    recompute_old_logprobs,
    reference_logprobs,
    reference_micros,
    sampled_reference_kl,
    update_micro_batches,
)
from rlvr.trainers.variants import rl_variant
from rlvr.verifiers.judge import reward_judge

log = logging.getLogger(__name__)

def tracks_kl(health) -> bool:
    """Measure KL to the reference at β = 0 on every row every step: asked for, or an ``adaptive_beta`` action
    may start β."""
    if health.track_kl is not None:
        return health.track_kl
    return any("adaptive_beta" in getattr(health.actions, r) for r in type(health.actions).model_fields)


def samples_kl(health, full: bool) -> bool:
    """Measure KL to the reference on a subsample (``health.kl_rows`` rows every ``health.kl_every`` steps):
    the default whenever it is not measured on every row and not turned off (``track_kl: false``)."""
    return not full and health.track_kl is None


# ------------------------------------------------------------------------------------------ batch


def needs_every_row(stage: RLStage, variant) -> bool:
    """Whether zero-advantage rows must be forwarded: a KL term on every row (``kl.rows: all``), an entropy
    bonus, or a loss in which a zero advantage still has a gradient."""
    kl_all = stage.kl.beta > 0 and stage.kl.rows == "all"
    return kl_all or stage.entropy_coef != 0 or variant.trains_zero_advantage


def first_update_reference(ref, model, batch: TokenBatch, stage: RLStage, bf16: bool, seed: int, step: int,
                           micro_tokens: int | str | None = "auto") -> torch.Tensor:
    """The reference pass of a step (``[B, T]``): :func:`reference_logprobs` on :func:`reference_micros` (the first
    update's micro-batches, wider where the update's token budget binds)."""
    first = minibatch_rows(batch.num_rows, stage.mini_batches, 1, seed, step)[0]
    return reference_logprobs(ref, model, batch, stage.sampling.temperature, stage.micro_batch_size, bf16,
                              reference_micros(model, batch, first, stage.micro_batch_size, micro_tokens),
                              Truncation.of(stage.sampling))


# ----------------------------------------------------------------------------------------- update


def update_minibatch(model, batch: TokenBatch, cfg, on_policy: bool, bf16: bool = False, dist=LOCAL,
                     micro_tokens: int | str | None = "auto") -> dict:
    """Forward/backward a mini-batch's forwarded rows in length-sorted micro-batches (see
    plan_micro_batches); every micro-batch divides by the denominators of all the mini-batch's rows,
    skipped ones included: exact gradients.

    With several processes (``dist``; every one holds the whole batch) each forwards its share of the
    rows, divides by the whole mini-batch's denominators, and the gradients are summed across processes."""
    total = len(batch)
    counts = global_counts(m for m in (batch.loss_mask, batch.skipped_mask) if m is not None)
    batch = batch.subset(dist.shard(batch.lengths()))
    micros = update_micro_batches(model, batch, list(range(len(batch))), cfg.micro_batch_size, micro_tokens)
    norm_len = cfg.sampling.max_new_tokens if cfg.loss.aggregation == "seq-mean-token-sum-norm" else None
    kw = counts.overrides(cfg.loss.aggregation, norm_len=norm_len)
    with shared_prefixes() as prefix:  # a group's prompt forwarded once (rlvr.models.prefix_share)
        met = accumulate(micros, partial(micro_batch_loss, model, batch, cfg, kw, on_policy, bf16, prefix=prefix),
                         total)
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


def policy_update(model, opt, sched, stage: RLStage, batch: TokenBatch, bf16: bool, seed: int = 0, step: int = 0,
                  dist=LOCAL, stale: bool = False, micro_tokens: int | str | None = "auto") -> dict:
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
        mismatch = recompute_old_logprobs(model, batch, stage, bf16, micros, micro_tokens)
    out: dict = {}
    corr: dict = {}
    n_updates = 0
    for epoch_minis in minis:
        for rows in epoch_minis:
            mini = batch.subset(rows)
            if len(mini) == 0:
                continue
            met = update_minibatch(model, mini, stage, on_policy, bf16, dist, micro_tokens)
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
    sample_kl = samples_kl(stage.health, track_kl)
    ref = frozen_reference(model, track_kl or sample_kl, model_cfg.train_bf16)
    eval_override = judge  # held-out evaluation judges with the evaluation's scoring, not the training reward
    judge = dist.wrap_judge(with_model_judges(judge or reward_judge(stage.rewards, stage.verifier_workers),
                                              stage.rewards, tok))
    engine = dist.engine(model, tok, bf16=model_cfg.decode_bf16)
    stream = TaskStream(load_task_source(stage.data), seed)
    source = rollout_source(stage, SourceSetup(model, tok, engine, judge, stream, seed, variant), dist.max_staleness)
    opt, sched = build_optimizer(model, stage.optim, stage.max_steps)
    run = open_stage(stage, out, model, tok, opt, sched, stage.max_steps, checkpoint=find_checkpoint(out, resume),
                     eval_cfg=eval_cfg, judge=eval_override, health=stage.health, crash_at_step=crash_at_step,
                     label="rl", dist=dist, knobs=rl_knobs(stage))
    stream.cursor = run.state.get("cursor", 0)
    dist.publish(model, run.step)
    source.start(run.state)
    base, bf16, micro_tokens = stage, model_cfg.train_bf16, model_cfg.micro_tokens
    kl_due = run.state.get("kl_due", False)
    try:
        while not run.done():
            stage = apply_knobs(base, run.health.knobs) if run.health is not None else base  # health actions
            phase = PhaseTimer()
            with phase("rollout"):  # generate + verify (time/generate, time/verify: the source's own split)
                batch = source.next_batch(run.step, stage)
            pause_on_infra(run, batch.metrics, batch.verdicts, batch.reward_errors)
            with phase("advantages"):
                source.advantages(batch, stage, needs_every_row(stage, variant))
            kl_met = {}
            with phase("ref"):
                if track_kl and len(batch):
                    batch.ref_logprobs = first_update_reference(ref, model, batch, stage, bf16, seed, run.step,
                                                                micro_tokens)
                elif sample_kl:  # due every kl_every steps; a step with no forwarded row passes it on
                    kl_due = kl_due or run.step % stage.health.kl_every == 0
                    if kl_due and len(batch):
                        kl_met, kl_due = sampled_reference_kl(ref, model, batch, stage, bf16, stage.health.kl_rows,
                                                              seed, run.step, micro_tokens), False
            with phase("train"):
                met = policy_update(model, opt, sched, stage, batch, bf16, seed, run.step, dist, batch.stale > 0,
                                    micro_tokens)
                dist.publish(model, run.step + 1)
            rec = {**batch.metrics, **met, **kl_met, **phase.metrics(), **dist.step_metrics()}
            stop = log_step(run, rec, {"cursor": batch.cursor, "kl_due": kl_due, **source.state_dict()}, ids=batch.task_ids,
                            info=f"pass {rec['rollout/pass_rate']:.2f} zero-var {rec['rollout/zero_var_frac']:.2f}")
            source.log_samples(run.step, batch)  # sample completions with their verdicts (logging.samples_every)
            if stop:
                break
    finally:
        source.close()
    result = close_stage(run)
    if dist.is_main:
        source.save(result.checkpoint)
    return result
