"""The loop RFT and distillation share: rounds of sample -> verify -> filter -> SFT.

Round r (steps ``r * steps_per_round`` .. ``(r + 1) * steps_per_round - 1``): take the next
``tasks_per_round`` tasks of the seeded task stream, let the sampler (the live policy for RFT, a frozen
teacher for distillation) draw K completions per task (seeded by (seed, r)), keep the verified ones
(:func:`rlvr.rollout.rejection.rejection_sample`), then ``steps_per_round`` SFT steps on them
(:func:`rlvr.trainers.common.sft_step`; batches in the deterministic order of ``data_order`` seeded by
(seed, r)). A round with nothing kept trains nothing: its steps are logged with ``train/skipped`` and
the optimiser does not step.

Resume: a checkpoint holds the task cursor, the round and that round's kept examples, so a run killed
mid-round continues on exactly the samples it had (N steps == N/2 + resume + N/2).
"""

from __future__ import annotations

import warnings
from pathlib import Path

from rlvr.data.order import TaskStream, data_order
from rlvr.data.sources import load_task_source
from rlvr.errors import ConfigError
from rlvr.rollout.hf_engine import HFEngine
from rlvr.rollout.rejection import rejection_sample
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
from rlvr.verifiers.judge import default_judge


def train_sample_sft(stage, model_cfg, run_dir: str | Path, seed: int = 0, init_path: str | None = None,
                     resume: bool = False, eval_cfg=None, judge=None, crash_at_step: int | None = None,
                     sampler=None, label: str = "rft") -> StageResult:
    """Run the rounds; ``sampler(model, tok) -> engine`` gives the engine that draws the candidates
    (default: the live policy itself, i.e. RFT)."""
    out, model, tok = load_policy(run_dir, stage.name, model_cfg, init_path, seed)
    verify = judge or default_judge(stage.verifier_workers)
    engine = sampler(model, tok) if sampler is not None else HFEngine(model, tok, bf16=model_cfg.decode_bf16)
    tasks = load_task_source(stage.data)
    if any(t.kind == "env" for t in tasks):
        raise ConfigError(f"stage {stage.name}: {stage.type} samples single completions; environment (multi-turn) "
                          "tasks are not supported here (train on their demonstrations with sft, or use rl with "
                          "rollout.mode: multi_turn)")
    stream = TaskStream(tasks, seed)
    opt, sched = build_optimizer(model, stage.optim, stage.max_steps)
    run = open_stage(stage, out, model, tok, opt, sched, stage.max_steps, checkpoint=find_checkpoint(out, resume),
                     eval_cfg=eval_cfg, judge=judge, crash_at_step=crash_at_step, label=label)
    stream.cursor = run.state.get("cursor", 0)
    examples = [tuple(e) for e in run.state.get("examples", [])]
    spr = stage.steps_per_round
    while not run.done():
        rnd, k = divmod(run.step, spr)
        rec: dict = {"sample/round": rnd}
        if k == 0 or run.state.get("round") != rnd:  # a new round: sample and filter
            tasks = stream.take(stage.tasks_per_round)
            examples, met = rejection_sample(engine, tok, tasks, verify, stage.sampling, stage.keep,
                                             stage.max_per_task, stage.max_length, seed * 100003 + rnd * 97)
            run.state["round"] = rnd
            rec.update(met)
        if examples:
            idx = data_order(len(examples), seed * 1009 + rnd, k, min(stage.batch_size, len(examples)))
            rec.update(sft_step(model, examples, idx, stage.micro_batch_size, stage.bucketing, tok.pad_token_id,
                                model_cfg.train_bf16, packing=stage.packing))
            rec["train/grad_norm"] = optimizer_step(model, opt, sched, stage.optim.max_grad_norm, rec["train/loss"])
        else:  # nothing verified this round: no update (AdamW momentum alone must not move the weights)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                sched.step()
            rec["train/skipped"] = 1
        state = {"cursor": stream.cursor, "round": rnd, "examples": [list(e) for e in examples]}
        if log_step(run, rec, state, info=f"round {rnd} kept {len(examples)}"):
            break
    return close_stage(run, extra={"rounds": stage.rounds})
