"""RL with verifiable rewards: the GRPO family (GRPO, DAPO, GSPO, Dr.GRPO, RLOO, REINFORCE++).

Reads top to bottom: setup -> rollout (G samples per task, one batched generate) -> verify -> rewards
-> advantages -> update (μ epochs × mini-batches, exact accumulation; zero-advantage sequences get no
backward) -> log -> checkpoint. Every random draw is seeded by (seed, step), so a resumed run
reproduces the uninterrupted one.
"""

from __future__ import annotations

import copy
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from rlvr.advantages import zero_variance_groups
from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig
from rlvr.config.rl import RLStage
from rlvr.data.sources import load_task_source
from rlvr.models.checkpoint import (
    latest_checkpoint,
    load_training_state,
    save_pretrained_atomic,
)
from rlvr.models.load import is_peft
from rlvr.monitoring.evaluate import default_judge
from rlvr.monitoring.health import HealthMonitor
from rlvr.monitoring.metrics import MetricsWriter
from rlvr.monitoring.progress import make_progress
from rlvr.rollout.collector import Rollouts, collect
from rlvr.rollout.hf_engine import HFEngine
from rlvr.trainers.agent import AgentRollout
from rlvr.trainers.common import build_optimizer, end_of_step, optimizer_step, start_policy_stage
from rlvr.trainers.eval_hook import EvalHook
from rlvr.trainers.rl_update import (
    build_train_batch,
    compute_advantages,
    reference_logprobs,
    update_minibatch,
)
from rlvr.trainers.sft import StageResult


class TaskStream:
    """Tasks in a seeded order, epoch after epoch; the cursor is part of the resumable state."""

    def __init__(self, tasks, seed: int, cursor: int = 0):
        self.tasks, self.seed, self.cursor = tasks, seed, cursor

    def take(self, n: int):
        out = []
        while len(out) < n:
            epoch, off = divmod(self.cursor, len(self.tasks))
            perm = np.random.default_rng([self.seed, 7, epoch]).permutation(len(self.tasks))
            out.append(self.tasks[int(perm[off])])
            self.cursor += 1
        return out


def rollout_step(stage: RLStage, engine, tok, stream: TaskStream, judge, seed: int, step: int, notes: list):
    """One rollout batch; with DAPO dynamic sampling, keep drawing until the batch is informative."""
    overlong = (0, 0.0)
    dyn = stage.loss.type == "dapo" and stage.loss.dynamic_sampling
    if stage.loss.type == "dapo":
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
    ent_sum, toks = out.pop("policy/entropy_sum", 0.0), out.pop("policy/tokens", 0.0)
    res = {k: v / n_updates for k, v in out.items()}
    res["policy/entropy"] = ent_sum / max(toks, 1.0)
    res["train/sequences"] = len(batch)
    res["train/updates"] = n_updates
    return res


def setup_reference(model, stage: RLStage):
    """The frozen reference: none when β = 0; the base with adapters disabled under LoRA; else a copy."""
    if stage.kl.beta <= 0 or is_peft(model):
        return None
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def train_rl(stage: RLStage, model_cfg: ModelConfig, run_dir: str | Path, seed: int = 0,
             init_path: str | None = None, resume: bool = False, eval_cfg: EvalConfig | None = None,
             judge=None, crash_at_step: int | None = None) -> StageResult:
    """Run a GRPO-family stage; returns where its final checkpoint is."""
    out, model, tok = start_policy_stage(run_dir, stage.name, model_cfg, init_path, seed)
    ref = setup_reference(model, stage)
    judge = judge or default_judge(stage.verifier_workers)
    engine = HFEngine(model, tok, bf16=model_cfg.autocast_bf16)
    agent = AgentRollout(stage, engine, tok, model) if stage.rollout.mode == "multi_turn" else None
    stream = TaskStream(load_task_source(stage.data), seed)
    opt, sched = build_optimizer(model, stage.optim, stage.max_steps)
    step, wall = 0, 0.0
    ckpt = latest_checkpoint(out / "checkpoints") if resume else None
    if ckpt is not None:
        st = load_training_state(ckpt, model, opt, sched)
        step, wall, stream.cursor = st["step"], st.get("wall_seconds", 0.0), st["cursor"]
    writer = MetricsWriter(out / "metrics.jsonl")
    if ckpt is not None:
        writer.log(step, {"event": "resume", "checkpoint": str(ckpt)})
    evaler = EvalHook(eval_cfg, tok, None, stage.eval_every) if eval_cfg is not None and stage.eval_every else None
    if evaler is not None and step == 0:
        writer.log(0, {**evaler.run(model, 0), "perf/minutes": 0.0})
    needs_all = stage.kl.beta > 0 or stage.entropy_coef != 0
    mask_trunc = getattr(stage.loss, "mask_truncated", False)
    notes: list[str] = []
    health = HealthMonitor(stage.health)
    with make_progress() as prog:
        bar = prog.add_task(f"rl:{stage.name}", total=stage.max_steps, completed=step, info="")
        while step < stage.max_steps:
            if stage.max_minutes is not None and wall >= stage.max_minutes * 60:
                break
            t0 = time.perf_counter()
            if agent is not None:  # multi-turn closed loop (trainers/agent.py)
                batch, ro_rec = agent.step(stream, seed, step, needs_all)
            else:
                ro, extra = rollout_step(stage, engine, tok, stream, judge, seed, step, notes)
                zv = zero_variance_groups(ro.rewards, ro.valid) if ro.num_groups else torch.zeros(0, dtype=torch.bool)
                adv = compute_advantages(stage.loss, ro.rewards, ro.valid) if ro.num_groups else torch.zeros(0, 1)
                batch = build_train_batch(ro, adv, needs_all, mask_trunc)
                ro_rec = {**rollout_metrics(ro, zv), **extra, "time/generate": ro.seconds.get("generate", 0.0),
                          "time/verify": ro.seconds.get("verify", 0.0)}
            if ref is not None or (stage.kl.beta > 0 and len(batch)):
                batch.ref_logprobs = reference_logprobs(ref, model, batch, tok.pad_token_id,
                                                        stage.sampling.temperature, stage.micro_batch_size)
            t1 = time.perf_counter()
            met = policy_update(model, opt, sched, stage, batch, tok.pad_token_id, model_cfg.autocast_bf16)
            step += 1
            t2 = time.perf_counter()
            wall += t2 - t0
            rec = {**ro_rec, **met, "time/train": t2 - t1,
                   "time/step": t2 - t0, "perf/minutes": wall / 60, "train/lr": sched.get_last_lr()[0]}
            if notes:
                rec["notes"] = notes.pop()
            if evaler is not None and evaler.due(step, stage.max_steps):
                rec.update(evaler.run(model, step))
            hm, alerts = health.observe(rec)
            rec.update(hm)
            for a in alerts:
                prog.console.print(f"[{'red' if a.level == 'critical' else 'yellow'}]health: {a.rule}[/] {a.message}")
            if alerts:
                rec["health/alerts"] = "; ".join(f"{a.rule}: {a.message}" for a in alerts)
            writer.log(step, rec)
            prog.update(bar, advance=1, info=f"pass {rec['rollout/pass_rate']:.2f} zero-var "
                                              f"{rec['rollout/zero_var_frac']:.2f} {rec['time/step']:.2f}s/step")
            end_of_step(out, stage, step, stage.max_steps, model, tok, opt, sched,
                        {"wall_seconds": wall, "cursor": stream.cursor}, crash_at_step)
            if health.should_stop(alerts):
                writer.log(step, {"event": "health_stop", "alerts": rec["health/alerts"]})
                break
    writer.close()
    final = save_pretrained_atomic(model, tok, out / "final")
    return StageResult(stage.name, str(final), str(out / "metrics.jsonl"), step, wall)
