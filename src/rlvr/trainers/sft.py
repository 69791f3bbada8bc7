"""Supervised fine-tuning: completion-only loss on worked demonstrations.

setup -> deterministic data order -> (packed or bucketed micro-batches, exact accumulation) -> AdamW step ->
log / eval / checkpoint. Resume restores model, optimizer, scheduler, RNG and the data position, so
N steps == N/2 + resume + N/2.
"""

from __future__ import annotations

from pathlib import Path

from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig
from rlvr.config.sft import SFTStage
from rlvr.data.chat import cut_demos, solution_example
from rlvr.data.order import data_order
from rlvr.data.sources import load_task_source
from rlvr.monitoring.heldout import SFTHeldout
from rlvr.rollout.multiturn import TurnTemplate, demo_example
from rlvr.trainers.common import (
    StageResult,
    build_optimizer,
    close_stage,
    find_checkpoint,
    load_policy,
    log_step,
    open_stage,
    optimizer_step,
    sft_step,
)
from rlvr.trainers.optimizer import over_seconds
from rlvr.trainers.variants import sft_loss_kwargs


def tokenize_demos(tasks, tokenizer, max_length: int, tool_role: str = "tool", what: str = "SFT"):
    """``(ids, loss_mask)`` per demonstration (:func:`demo_examples`), cut to ``max_length``
    (``data.chat.cut_demos``)."""
    tasks = list(tasks)
    return cut_demos(demo_examples(tasks, tokenizer, tool_role, what), tasks, max_length, what)


def demo_examples(tasks: list, tokenizer, tool_role: str = "tool", what: str = "SFT") -> list:
    """``(ids, loss_mask)`` per demonstration, whole: environment tasks laid out turn by turn with the real
    observations, exactly as a closed-loop rollout (rollout/multiturn.py); the others as one completion
    (``data.chat.solution_example``, as the held-out loss encodes them)."""
    template = None
    examples = []
    for t in tasks:
        if t.kind == "env" and t.solution:
            template = template or TurnTemplate(tokenizer, tool_role)
            examples.append(demo_example(tokenizer, t, tool_role, None, template=template))
        else:
            examples.append(solution_example(tokenizer, t, what))
    return examples


def train_sft(stage: SFTStage, model_cfg: ModelConfig, run_dir: str | Path, seed: int = 0,
              init_path: str | None = None, resume: bool = False, eval_cfg: EvalConfig | None = None,
              judge=None, crash_at_step: int | None = None, data_offset: int = 0,
              lr_over: tuple[int, float] | None = None) -> StageResult:
    """Run an SFT stage; returns where its final checkpoint is. ``data_offset``: the data stream starts at this
    step's batch (a continued stage, e.g. the equal-time control, sees the demonstrations its source would see
    next). ``lr_over`` ``(steps, seconds)``: the schedule of ``steps`` steps laid over ``seconds`` of training time
    (a stage its time budget ends, :func:`rlvr.trainers.optimizer.over_seconds`)."""
    out, model, tok = load_policy(run_dir, stage.name, model_cfg, init_path, seed)
    examples = tokenize_demos(load_task_source(stage.data), tok, stage.max_length, what=f"stages.{stage.name}")
    opt, sched = build_optimizer(model, stage.optim, stage.max_steps)
    heldout = SFTHeldout(stage, tok, out, model_cfg.train_bf16)  # held-out loss, keep-best, early stop
    run = open_stage(stage, out, model, tok, opt, sched, stage.max_steps, checkpoint=find_checkpoint(out, resume),
                     eval_cfg=eval_cfg, judge=judge, crash_at_step=crash_at_step,
                     start={"train_examples": len(examples)})
    heldout.load(run.state)
    if lr_over is not None:
        over_seconds(sched, stage.optim, *lr_over, clock=lambda: run.seconds)
    run.heldout = heldout  # log_step measures and observes it with the held-out eval, off the training clock
    if run.step == 0:
        rec0 = {**run.last, **heldout.measure(model, 0, stage.max_steps)}  # with step 0's eval, when it ran
        heldout.observe(model, tok, 0, rec0)
        rec0 = {k: v for k, v in rec0.items() if k.startswith("heldout/")}
        if rec0:
            run.writer.log(0, rec0)
    while not run.done() and not heldout.stopped:
        idx = data_order(len(examples), seed, data_offset + run.step, stage.batch_size)
        rec = sft_step(model, examples, idx, stage.micro_batch_size, stage.bucketing, tok.pad_token_id,
                       model_cfg.train_bf16, sft_loss_kwargs(stage.loss), packing=stage.packing,
                       micro_tokens=model_cfg.micro_tokens)
        rec["train/grad_norm"] = optimizer_step(model, opt, sched, stage.optim.max_grad_norm, rec["train/loss"])
        log_step(run, rec, info=f"loss {rec['train/loss']:.3f}", ids=[f"row {i}" for i in idx])
    extra = {}
    if heldout.stopped:  # patience ran out
        extra["early_stop"] = {"step": run.step, "best_step": heldout.best_step, "best": heldout.best,
                               "metric": stage.best_metric}
        run.writer.log(run.step, {"event": "early_stop", "best_step": heldout.best_step, "best": heldout.best})
    return close_stage(run, extra=extra, final=lambda: heldout.final(model, tok))
