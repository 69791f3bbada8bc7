"""RL with verifiable rewards: the GRPO family (GRPO, DAPO, GSPO, Dr.GRPO, RLOO, REINFORCE++).

Reads top to bottom: setup -> rollout (G samples per task, one batched generate; dynamic sampling
draws more until the batch is informative) -> verify -> rewards -> advantages (the variant's
estimator, see ``trainers/variants.py``) -> update (μ epochs × mini-batches of the clipped surrogate
(+KL, +entropy) with exact accumulation; zero-advantage sequences get no backward) -> log ->
checkpoint. Every random draw is seeded by (seed, step), so a resumed run reproduces the
uninterrupted one.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rlvr.advantages import zero_variance_groups
from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig
from rlvr.config.rl import RLStage
from rlvr.data.collate import pad_batch, plan_micro_batches, split_overhead
from rlvr.data.order import TaskStream
from rlvr.data.sources import load_task_source
from rlvr.losses.aggregate import aggregate, global_counts
from rlvr.losses.kl import kl_penalty
from rlvr.losses.policy import clipped_surrogate
from rlvr.models.logprobs import token_logprobs
from rlvr.rollout.collector import Rollouts, collect
from rlvr.rollout.hf_engine import HFEngine
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
    reference_model,
)
from rlvr.trainers.variants import rl_variant
from rlvr.verifiers.judge import default_judge

# --------------------------------------------------------------------------------------- rollout


def rollout_step(stage: RLStage, engine, tok, stream: TaskStream, judge, seed: int, step: int, notes: list):
    """One rollout batch; with DAPO dynamic sampling, keep drawing until the batch is informative."""
    overlong = (0, 0.0)
    dyn = getattr(stage.loss, "dynamic_sampling", False)
    if hasattr(stage.loss, "overlong_buffer"):
        overlong = (stage.loss.overlong_buffer, stage.loss.overlong_penalty)
    parts, kept, drawn, rnd = [], 0, 0, 0
    while True:
        tasks = stream.take(stage.tasks_per_step)
        ro = collect(engine, tok, tasks, judge, stage.sampling, stage.rewards, seed=seed * 100003 + step * 97 + rnd,
                     overlong=overlong)
        drawn += ro.num_groups
        if not dyn:
            return ro, {"rollout/groups_drawn": drawn}
        zv = zero_variance_groups(ro.rewards, ro.valid)
        keep = [g for g in range(ro.num_groups) if not zv[g]][: stage.tasks_per_step - kept]
        parts.append(ro.select_groups(keep))
        kept += len(keep)
        rnd += 1
        if kept >= stage.tasks_per_step or rnd > stage.loss.max_resample_rounds:
            break
    if kept < stage.tasks_per_step:
        rate = float(ro.passed.float().mean())
        hint = "too easy" if rate > 0.5 else "too hard"
        notes.append(f"step {step}: dynamic sampling found {kept}/{stage.tasks_per_step} informative groups after "
                     f"{rnd} rounds (pass rate {rate:.0%}: the data looks {hint} for this policy)")
    merged = Rollouts.concat(parts) if kept else ro.select_groups([])
    return merged, {"rollout/groups_drawn": drawn, "rollout/resample_rounds": rnd}


def rollout_metrics(ro: Rollouts, zv: torch.Tensor) -> dict:
    lens = torch.tensor([len(c) for c in ro.completion_ids], dtype=torch.float32)
    m = {"rollout/pass_rate": float(ro.passed.float().mean()) if ro.num_groups else 0.0,
         "reward/mean": float(ro.rewards.mean()) if ro.num_groups else 0.0,
         "reward/std": float(ro.rewards.std()) if ro.rewards.numel() > 1 else 0.0,
         "rollout/zero_var_frac": float(zv.float().mean()) if ro.num_groups else 1.0,
         "rollout/length_mean": float(lens.mean()) if len(lens) else 0.0,
         "rollout/length_max": float(lens.max()) if len(lens) else 0.0,
         "rollout/truncation_rate": float(np.mean([r == "length" for r in ro.finish_reason])) if lens.numel() else 0.0,
         "verifier/infra": int((~ro.valid).sum())}
    for k, v in ro.reward_terms.items():
        m[f"reward/{k}"] = float(v.mean()) if v.numel() else 0.0
    for o in set(ro.outcomes):
        m[f"verifier/{o}"] = ro.outcomes.count(o)
    return m


# ------------------------------------------------------------------------------------------ batch


@dataclass
class TrainBatch:
    """Trajectories selected for the backward pass (row-aligned lists; per-token lists include the prompt)."""

    input_ids: list[list[int]]
    loss_mask: list[list[int]]
    old_logprobs: list[list[float]]   # 0 on prompt positions
    ref_logprobs: list[list[float]] | None
    advantages: list[float]

    def __len__(self) -> int:
        return len(self.input_ids)

    def subset(self, rows: list[int]) -> TrainBatch:
        pick = lambda xs: None if xs is None else [xs[i] for i in rows]  # noqa: E731
        return TrainBatch(pick(self.input_ids), pick(self.loss_mask), pick(self.old_logprobs),
                          pick(self.ref_logprobs), pick(self.advantages))


def build_train_batch(ro, advantages: torch.Tensor, needs_all: bool, mask_truncated: bool) -> TrainBatch:
    """Flatten rollouts into training rows; drop zero-advantage rows unless ``needs_all`` (KL/entropy)."""
    adv = advantages.reshape(-1).tolist()
    valid = ro.valid.reshape(-1).tolist()
    rows = TrainBatch([], [], [], None, [])
    for i, (p, c) in enumerate(zip(ro.prompt_ids, ro.completion_ids)):
        if not valid[i] or not c or (adv[i] == 0.0 and not needs_all):
            continue
        if mask_truncated and ro.finish_reason[i] == "length":
            continue
        rows.input_ids.append(p + c)
        rows.loss_mask.append([0] * len(p) + [1] * len(c))
        rows.old_logprobs.append([0.0] * len(p) + list(ro.old_logprobs[i]))
        rows.advantages.append(adv[i])
    return rows


@torch.no_grad()
def reference_logprobs(ref_model, policy, batch: TrainBatch, pad_id: int, temperature: float, micro: int):
    """Frozen-reference logprobs, computed once per rollout batch (LoRA: adapters disabled)."""
    out: list = [None] * len(batch)
    with reference_model(policy, ref_model) as model:
        for rows in plan_micro_batches([len(s) for s in batch.input_ids], micro, split_overhead(model)):
            ids, att, _ = pad_batch([batch.input_ids[i] for i in rows], pad_id, left=False, device=model.device)
            lp, _ = token_logprobs(model, ids, att, temperature)
            for k, i in enumerate(rows):
                out[i] = lp[k, : len(batch.input_ids[i])].tolist()
    return out


# ----------------------------------------------------------------------------------------- update


def micro_loss(model, mb: TrainBatch, cfg, counts_kw: dict, pad_id: int, on_policy: bool, bf16: bool = False):
    """Loss of one micro-batch, already divided by the mini-batch's global denominator."""
    dev = model.device
    ids, att, lm = pad_batch(mb.input_ids, pad_id, mb.loss_mask, left=False, device=dev)
    T = ids.shape[1]
    old = torch.tensor([o + [0.0] * (T - len(o)) for o in mb.old_logprobs], device=dev)
    logprobs, entropy = token_logprobs(model, ids, att, cfg.sampling.temperature, with_entropy=True,
                                       bf16=bf16)
    if on_policy:
        old = logprobs.detach()
    eps_low, eps_high, level = rl_variant(cfg.loss).clip(cfg.loss)
    adv = torch.tensor(mb.advantages, dtype=torch.float32, device=dev)
    per_tok, metrics = clipped_surrogate(logprobs, old, adv, lm, eps_low, eps_high, level=level)
    if cfg.kl.beta > 0:
        ref = torch.tensor([r + [0.0] * (T - len(r)) for r in mb.ref_logprobs], device=dev)
        kl = kl_penalty(logprobs, ref, kind=cfg.kl.estimator, loss_mask=lm)
        per_tok = per_tok + cfg.kl.beta * kl
        metrics["kl/ref"] = float((kl.detach() * lm).sum() / lm.sum().clamp(min=1))
    if cfg.entropy_coef:
        per_tok = per_tok - cfg.entropy_coef * entropy
    loss = aggregate(per_tok, lm, cfg.loss.aggregation, **counts_kw)
    metrics["policy/entropy_sum"] = float((entropy * lm).sum())
    metrics["policy/tokens_sum"] = float(lm.sum())
    return loss, metrics


def update_minibatch(model, batch: TrainBatch, cfg, pad_id: int, on_policy: bool, bf16: bool = False) -> dict:
    """Forward/backward a mini-batch in length-sorted micro-batches (see plan_micro_batches); exact grads."""
    micros = plan_micro_batches([len(s) for s in batch.input_ids], cfg.micro_batch_size, split_overhead(model))
    masks = [pad_batch([batch.input_ids[i] for i in m], pad_id, [batch.loss_mask[i] for i in m], left=False)[2]
             for m in micros]
    counts = global_counts(masks)
    norm_len = cfg.sampling.max_new_tokens if cfg.loss.aggregation == "seq-mean-token-sum-norm" else None
    kw = counts.overrides(cfg.loss.aggregation, norm_len=norm_len)
    return accumulate(micros, lambda m: micro_loss(model, batch.subset(m), cfg, kw, pad_id, on_policy, bf16),
                      len(batch))


def policy_update(model, opt, sched, stage: RLStage, batch, pad_id: int, bf16: bool) -> dict:
    """μ epochs over the batch in ``mini_batches`` optimizer steps; returns averaged metrics."""
    if len(batch) == 0:
        with warnings.catch_warnings():  # no optimizer step: AdamW momentum must not move the weights
            warnings.simplefilter("ignore", UserWarning)
            sched.step()
        return {"train/sequences": 0}
    on_policy = stage.ppo_epochs == 1 and stage.mini_batches == 1
    out: dict = {}
    n_updates = 0
    for epoch in range(stage.ppo_epochs):
        order = np.random.default_rng([len(batch), epoch]).permutation(len(batch)).tolist()
        size = -(-len(batch) // stage.mini_batches)
        for s in range(0, len(batch), size):
            met = update_minibatch(model, batch.subset(order[s:s + size]), stage, pad_id, on_policy, bf16)
            met["train/grad_norm"] = optimizer_step(model, opt, None, stage.optim.max_grad_norm)
            n_updates += 1
            for k, v in met.items():
                out[k] = out.get(k, 0.0) + v
    sched.step()
    ent_sum, toks = out.pop("policy/entropy_sum", 0.0), out.pop("policy/tokens_sum", 0.0)
    res = {k: v / n_updates for k, v in out.items()}
    res["policy/entropy"] = ent_sum / max(toks, 1.0)
    res["train/sequences"] = len(batch)
    res["train/updates"] = n_updates
    return res


# ---------------------------------------------------------------------------------------- trainer


def train_rl(stage: RLStage, model_cfg: ModelConfig, run_dir: str | Path, seed: int = 0,
             init_path: str | None = None, resume: bool = False, eval_cfg: EvalConfig | None = None,
             judge=None, crash_at_step: int | None = None) -> StageResult:
    """Run a GRPO-family stage; returns where its final checkpoint is."""
    out, model, tok = load_policy(run_dir, stage.name, model_cfg, init_path, seed)
    ref = frozen_reference(model, stage.kl.beta > 0)
    judge = judge or default_judge(stage.verifier_workers)
    engine = HFEngine(model, tok, bf16=model_cfg.autocast_bf16)
    stream = TaskStream(load_task_source(stage.data), seed)
    opt, sched = build_optimizer(model, stage.optim, stage.max_steps)
    run = open_stage(stage, out, model, tok, opt, sched, stage.max_steps, checkpoint=find_checkpoint(out, resume),
                     eval_cfg=eval_cfg, judge=judge, health=stage.health, crash_at_step=crash_at_step,
                     label="rl")
    stream.cursor = run.state.get("cursor", 0)
    variant = rl_variant(stage.loss)
    needs_all = stage.kl.beta > 0 or stage.entropy_coef != 0
    mask_trunc = getattr(stage.loss, "mask_truncated", False)
    notes: list[str] = []
    while not run.done():
        ro, extra = rollout_step(stage, engine, tok, stream, judge, seed, run.step, notes)
        zv = zero_variance_groups(ro.rewards, ro.valid) if ro.num_groups else torch.zeros(0, dtype=torch.bool)
        adv = variant.advantages(stage.loss, ro.rewards, ro.valid) if ro.num_groups else torch.zeros(0, 1)
        batch = build_train_batch(ro, adv, needs_all, mask_trunc)
        if stage.kl.beta > 0 and len(batch):
            batch.ref_logprobs = reference_logprobs(ref, model, batch, tok.pad_token_id,
                                                    stage.sampling.temperature, stage.micro_batch_size)
        t0 = time.perf_counter()
        met = policy_update(model, opt, sched, stage, batch, tok.pad_token_id, model_cfg.autocast_bf16)
        rec = {**rollout_metrics(ro, zv), **extra, **met, "time/generate": ro.seconds.get("generate", 0.0),
               "time/verify": ro.seconds.get("verify", 0.0), "time/train": time.perf_counter() - t0}
        if notes:
            rec["notes"] = notes.pop()
        stop = log_step(run, rec, {"cursor": stream.cursor},
                        info=f"pass {rec['rollout/pass_rate']:.2f} zero-var {rec['rollout/zero_var_frac']:.2f}")
        if stop:
            break
    return close_stage(run)
