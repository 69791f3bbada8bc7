"""Supervised fine-tuning: completion-only loss on worked demonstrations.

setup -> deterministic data order -> (bucketed micro-batches, exact accumulation) -> AdamW step ->
log / eval / checkpoint. Resume restores model, optimizer, scheduler, RNG and the data position, so
N steps == N/2 + resume + N/2.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig
from rlvr.config.sft import SFTStage
from rlvr.data.chat import encode_example
from rlvr.data.sources import load_task_source
from rlvr.errors import DataError
from rlvr.losses.sft import sft_loss
from rlvr.models.checkpoint import (
    latest_checkpoint,
    load_training_state,
    save_pretrained_atomic,
)
from rlvr.models.logprobs import autocast_ctx, position_ids_from_mask
from rlvr.monitoring.metrics import MetricsWriter
from rlvr.monitoring.progress import make_progress
from rlvr.rollout.multiturn import TurnTemplate, demo_example
from rlvr.trainers.common import build_optimizer, end_of_step, optimizer_step, pad_batch, start_policy_stage
from rlvr.trainers.eval_hook import EvalHook


@dataclass
class StageResult:
    """What a stage leaves behind."""

    name: str
    checkpoint: str
    metrics_path: str
    steps: int
    train_seconds: float
    extra: dict = field(default_factory=dict)


def tokenize_demos(tasks, tokenizer, max_length: int, tool_role: str = "tool"):
    """``(ids, loss_mask)`` per demonstration; environment tasks are laid out turn by turn with the real
    observations, exactly as a closed-loop rollout (rollout/multiturn.py)."""
    examples, template = [], None
    for t in tasks:
        if not t.solution:
            raise DataError(f"SFT task {t.id!r} has no 'solution' (a worked demonstration is required)")
        if t.kind == "env":
            template = template or TurnTemplate(tokenizer, tool_role)
            examples.append(demo_example(tokenizer, t, tool_role, max_length, template=template))
        else:
            examples.append(encode_example(tokenizer, t, t.solution, max_length))
    return examples


def data_order(n_examples: int, seed: int, step: int, batch_size: int) -> list[int]:
    """Example indices for optimizer step ``step``: epochs are seeded permutations, concatenated."""
    start = step * batch_size
    idx = []
    while len(idx) < batch_size:
        epoch, off = divmod(start + len(idx), n_examples)
        perm = np.random.default_rng([seed, epoch]).permutation(n_examples)
        idx.extend(perm[off: off + batch_size - len(idx)].tolist())
    return idx


def micro_batches(examples, idx: list[int], micro: int, bucketing: bool):
    """Split a step's examples into micro-batches (sorted by length first when bucketing)."""
    if bucketing:
        idx = sorted(idx, key=lambda i: (len(examples[i][0]), i))
    return [idx[s:s + micro] for s in range(0, len(idx), micro)]


def sft_step(model, examples, idx, stage: SFTStage, pad_id: int, bf16: bool) -> dict:
    """Forward/backward over micro-batches; the loss is the token mean over the whole step's batch."""
    total_tokens = sum(sum(examples[i][1]) for i in idx)
    loss_sum = 0.0
    for mb in micro_batches(examples, idx, stage.micro_batch_size, stage.bucketing):
        ids, att, lm = pad_batch([examples[i][0] for i in mb], pad_id, [examples[i][1] for i in mb], left=False,
                                 device=model.device)
        with autocast_ctx(bf16, ids.device.type):
            logits = model(input_ids=ids, attention_mask=att, position_ids=position_ids_from_mask(att),
                           use_cache=False).logits
        nll_sum, _, _ = sft_loss(logits, ids, lm, shift=True)
        (nll_sum / total_tokens).backward()
        loss_sum += float(nll_sum.detach())
    return {"loss": loss_sum / max(1, total_tokens), "tokens": total_tokens}


def train_sft(stage: SFTStage, model_cfg: ModelConfig, run_dir: str | Path, seed: int = 0,
              init_path: str | None = None, resume: bool = False, eval_cfg: EvalConfig | None = None,
              judge=None, crash_at_step: int | None = None) -> StageResult:
    """Run an SFT stage; returns where its final checkpoint is."""
    out, model, tok = start_policy_stage(run_dir, stage.name, model_cfg, init_path, seed)
    examples = tokenize_demos(load_task_source(stage.data), tok, stage.max_length)
    opt, sched = build_optimizer(model, stage.optim, stage.max_steps)
    step, train_s = 0, 0.0
    ckpt = latest_checkpoint(out / "checkpoints") if resume else None
    if ckpt is not None:
        st = load_training_state(ckpt, model, opt, sched)
        step, train_s = st["step"], st.get("train_seconds", 0.0)
    writer = MetricsWriter(out / "metrics.jsonl")
    if ckpt is not None:
        writer.log(step, {"event": "resume", "checkpoint": str(ckpt)})
    evaler = EvalHook(eval_cfg, tok, judge, stage.eval_every) if eval_cfg is not None else None
    if evaler is not None and step == 0:
        writer.log(0, {**evaler.run(model, 0), "perf/train_minutes": 0.0})
    bf16 = model_cfg.autocast_bf16
    with make_progress() as prog:
        bar = prog.add_task(f"sft:{stage.name}", total=stage.max_steps, completed=step, info="")
        while step < stage.max_steps:
            if stage.max_minutes is not None and train_s >= stage.max_minutes * 60:
                break
            t0 = time.perf_counter()
            m = sft_step(model, examples, data_order(len(examples), seed, step, stage.batch_size), stage,
                         tok.pad_token_id, bf16)
            gnorm = optimizer_step(model, opt, sched, stage.optim.max_grad_norm)
            step += 1
            dt = time.perf_counter() - t0
            train_s += dt
            rec = {"train/loss": m["loss"], "train/grad_norm": gnorm, "train/lr": sched.get_last_lr()[0],
                   "perf/tokens_per_s": m["tokens"] / dt, "perf/train_minutes": train_s / 60}
            if evaler is not None and evaler.due(step, stage.max_steps):
                rec.update(evaler.run(model, step))
            if step % stage.log_every == 0 or step == stage.max_steps or "eval/pass_at_1" in rec:
                writer.log(step, rec)
            prog.update(bar, advance=1, info=f"loss {m['loss']:.3f} {rec['perf/tokens_per_s']:.0f} tok/s")
            end_of_step(out, stage, step, stage.max_steps, model, tok, opt, sched,
                        {"train_seconds": train_s}, crash_at_step)
    writer.close()
    final = save_pretrained_atomic(model, tok, out / "final")
    return StageResult(stage.name, str(final), str(out / "metrics.jsonl"), step, train_s)
