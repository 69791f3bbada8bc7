"""On-policy distillation stage: student samples -> teacher logits on them -> reverse KL -> update -> log.

Reads top to bottom like the RL stage, without a verifier in the loss: each step draws ``tasks_per_step``
prompts, samples ``group_size`` completions from the student (the in-process engine), forwards student and
teacher over prompt + completion and minimises the token-mean of ``KL(π_S || π_T)`` over the completion
tokens (``rlvr.losses.reverse_kl``), with exact accumulation over length-sorted micro-batches. The
verifier's pass rate of the samples is logged (``rollout/pass_rate``) but never trained on.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from rlvr.advantages import zero_variance_groups
from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig
from rlvr.config.onpolicy import OnPolicyDistillStage
from rlvr.config.rl import RewardTerm
from rlvr.data.collate import pad_batch
from rlvr.data.order import TaskStream
from rlvr.data.sources import load_task_source
from rlvr.losses.reverse_kl import reverse_kl
from rlvr.models.load import load_pretrained
from rlvr.models.logprobs import autocast_ctx, entropy_from_logits, position_ids_from_mask
from rlvr.rollout.collector import collect
from rlvr.trainers.common import (
    StageResult,
    accumulate,
    build_optimizer,
    close_stage,
    find_checkpoint,
    load_policy,
    log_step,
    open_stage,
    optimizer_step,
)
from rlvr.trainers.parallel import LOCAL
from rlvr.verifiers.judge import reward_judge


def distill_loss(model, teacher, rows: list[tuple[list[int], int]], pad_id: int, temperature: float, total_tokens: int,
                 bf16: bool = False):
    """Reverse-KL loss of one micro-batch (``rows``: token ids and prompt length), divided by the step's
    completion-token count (exact accumulation)."""
    ids, att, _ = pad_batch([r for r, _ in rows], pad_id, left=False, device=model.device)
    mask = torch.zeros_like(ids, dtype=torch.float32)
    for k, (r, p) in enumerate(rows):
        mask[k, p:len(r)] = 1.0
    pos = position_ids_from_mask(att)
    with autocast_ctx(bf16, ids.device.type):
        s = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False).logits[:, :-1]
    with torch.no_grad():
        t = teacher(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False).logits[:, :-1]
    m = mask[:, 1:]
    kl = reverse_kl(s, t, m, temperature)
    with torch.no_grad():
        ent = entropy_from_logits(s.detach(), temperature=temperature)
    return kl.sum() / max(1, total_tokens), {"distill/reverse_kl_sum": float(kl.detach().sum()),
                                             "policy/entropy_sum": float((ent * m).sum())}


def train_onpolicy_distill(stage: OnPolicyDistillStage, model_cfg: ModelConfig, run_dir: str | Path, seed: int = 0,
                           init_path: str | None = None, resume: bool = False, eval_cfg: EvalConfig | None = None,
                           judge=None, crash_at_step: int | None = None) -> StageResult:
    """Run an on-policy distillation stage; returns where its final checkpoint is."""
    out, model, tok = load_policy(run_dir, stage.name, model_cfg, init_path, seed)
    teacher = load_pretrained(stage.teacher)[0].to(model.device).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    judge = judge or reward_judge([RewardTerm()], 0)
    engine = LOCAL.engine(model, tok, bf16=model_cfg.decode_bf16)
    stream = TaskStream(load_task_source(stage.data), seed)
    opt, sched = build_optimizer(model, stage.optim, stage.max_steps)
    run = open_stage(stage, out, model, tok, opt, sched, stage.max_steps, checkpoint=find_checkpoint(out, resume),
                     eval_cfg=eval_cfg, judge=judge, crash_at_step=crash_at_step, label="distill")
    stream.cursor = run.state.get("cursor", 0)
    while not run.done():
        ro = collect(engine, tok, stream.take(stage.tasks_per_step), judge, stage.sampling, [RewardTerm()],
                     seed=seed * 100003 + run.step * 97)
        rows = [(p + c, len(p)) for p, c in zip(ro.prompt_ids, ro.completion_ids) if c]
        total = sum(len(r) - p for r, p in rows)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
        micros = [order[s:s + stage.micro_batch_size] for s in range(0, len(order), stage.micro_batch_size)]
        t0 = time.perf_counter()
        def forward(m, rows=rows, total=total):
            return distill_loss(model, teacher, [rows[i] for i in m], tok.pad_token_id, stage.sampling.temperature,
                                total, model_cfg.train_bf16)

        met = accumulate(micros, forward, len(rows)) if rows else {}
        grad_norm = optimizer_step(model, opt, sched, stage.optim.max_grad_norm) if rows else 0.0
        rec = {"rollout/pass_rate": float(ro.passed.float().mean()), "train/tokens": total,
               "rollout/zero_var_frac": float(zero_variance_groups(ro.passed.float()).float().mean()),
               "policy/entropy": met.pop("policy/entropy_sum", 0.0) / max(1, total),
               "distill/reverse_kl": met.pop("distill/reverse_kl_sum", 0.0) / max(1, total),
               "train/loss": met.get("train/loss", 0.0), "train/grad_norm": grad_norm,
               "time/generate": ro.seconds.get("generate", 0.0), "time/train": time.perf_counter() - t0}
        log_step(run, rec, {"cursor": stream.cursor},
                 info=f"kl {rec['distill/reverse_kl']:.3f} pass {rec['rollout/pass_rate']:.2f}")
    return close_stage(run)
