"""Pieces every trainer shares: optimiser + schedule, thread setup, run-dir bookkeeping, batching."""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch

from rlvr.config.optim import OptimConfig
from rlvr.errors import ConfigError
from rlvr.models.checkpoint import save_training_checkpoint


def setup_threads(threads: int | None) -> None:
    """Set torch intra-op threads (OMP_WAIT_POLICY=PASSIVE is set by the CLI before torch loads)."""
    if threads:
        torch.set_num_threads(threads)


def build_optimizer(model, cfg: OptimConfig, total_steps: int):
    """AdamW over trainable parameters, with linear warmup then cosine/linear/constant decay.

    Every trainable parameter must be float32 (the master weights): AdamW on bf16/fp16 weights rounds
    away the updates smaller than half a weight's ulp, i.e. most of them at RL learning rates.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    low = [n for n, p in model.named_parameters() if p.requires_grad and p.dtype != torch.float32]
    if low:
        raise ConfigError(
            f"{len(low)} trainable parameters are not float32 (e.g. {low[0]}): training them without fp32 "
            "master weights loses most AdamW updates. Use model.dtype: float32 with model.autocast_bf16: true "
            "(fp32 weights, bf16 compute), or LoRA on a low-precision base (adapters are kept in float32)")
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda=lr_lambda(cfg, total_steps))
    return opt, sched


def lr_lambda(cfg: OptimConfig, total_steps: int):
    """Multiplier of the peak lr at a step: warmup, then the schedule down to min_lr_ratio."""
    warm = max(0, cfg.warmup_steps)
    floor = cfg.min_lr_ratio

    def f(step: int) -> float:
        if step < warm:
            return (step + 1) / (warm + 1)
        if cfg.schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warm) / max(1, total_steps - warm))
        if cfg.schedule == "linear":
            return floor + (1 - floor) * (1 - progress)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    return f


def clip_grads(model, max_norm: float) -> float:
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return 0.0
    if max_norm and max_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    return float(torch.norm(torch.stack([p.grad.detach().norm() for p in params])))


def optimizer_step(model, opt, sched, max_grad_norm: float) -> float:
    """Clip, step the optimizer and (when given) the schedule, clear grads; returns the grad norm."""
    norm = clip_grads(model, max_grad_norm)
    opt.step()
    if sched is not None:
        sched.step()
    opt.zero_grad(set_to_none=True)
    return norm


def start_policy_stage(run_dir: str | Path, name: str, model_cfg, init_path: str | None, seed: int):
    """Common stage start: its run sub-directory, global seeds, the policy in train mode and tokenizer."""
    from rlvr.models.checkpoint import seed_everything
    from rlvr.models.load import load_model_and_tokenizer

    out = stage_dir(run_dir, name)
    seed_everything(seed)
    model, tok = load_model_and_tokenizer(model_cfg, init_path)
    model.train()
    return out, model, tok


def end_of_step(out: Path, stage, step: int, n_steps: int, model, tok, opt, sched, state: dict,
                crash_at_step: int | None = None) -> None:
    """What every trainer does after step ``step`` of ``n_steps``: a resumable checkpoint every
    ``stage.save_every`` steps (not at the last step: ``final/`` follows) holding ``state``, the trainer's
    own extra state, then the simulated crash (``crash_at_step``) the resume tests use."""
    if stage.save_every and step % stage.save_every == 0 and step < n_steps:
        save_training_checkpoint(out / "checkpoints", step, model, tok, opt, sched, state, stage.keep_last)
    if crash_at_step is not None and step == crash_at_step:
        raise KeyboardInterrupt(f"simulated crash at step {step}")


def stage_dir(run_dir: str | Path, name: str) -> Path:
    p = Path(run_dir) / name
    p.mkdir(parents=True, exist_ok=True)
    return p


def pad_batch(seqs: list[list[int]], pad_id: int, masks: list[list[int]] | None = None, left: bool = True,
              device=None):
    """Pad token lists to a tensor batch ``(input_ids, attention_mask, loss_mask or None)`` on ``device``."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), T), dtype=torch.long)
    lm = torch.zeros((len(seqs), T), dtype=torch.float32) if masks is not None else None
    for i, s in enumerate(seqs):
        sl = slice(T - len(s), T) if left else slice(0, len(s))
        ids[i, sl] = torch.tensor(s, dtype=torch.long)
        att[i, sl] = 1
        if lm is not None:
            lm[i, sl] = torch.tensor(masks[i], dtype=torch.float32)
    if device is not None and str(device) != "cpu":
        ids, att = ids.to(device), att.to(device)
        lm = lm.to(device) if lm is not None else None
    return ids, att, lm


def omp_passive() -> None:
    """Ask OpenMP threads to sleep instead of spin when idle (set before torch is imported)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def logprob_mismatch(trainer: list[list[float]], sampler: list[list[float]], masks: list[list[int]]) -> dict:
    """Mean and max ``|trainer - sampler|`` logprob over the trained tokens (``rollout/logprob_mismatch_*``)."""
    gaps = [abs(t - s) for tr, sa, ms in zip(trainer, sampler, masks) for t, s, m in zip(tr, sa, ms) if m]
    if not gaps:
        return {}
    return {"rollout/logprob_mismatch_mean": sum(gaps) / len(gaps), "rollout/logprob_mismatch_max": max(gaps)}
