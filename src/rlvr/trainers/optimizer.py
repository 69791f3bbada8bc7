"""The optimiser of every stage: AdamW over the fp32 master weights, its learning-rate schedule (linear warmup,
then cosine / linear / constant down to ``min_lr_ratio``), gradient clipping, and the step that skips a
non-finite update (``rlvr.trainers.guards``). ``rlvr.trainers.common`` re-exports them."""

from __future__ import annotations

import math

import torch

from rlvr import hooks
from rlvr.config.optim import OptimConfig
from rlvr.errors import ConfigError
from rlvr.trainers.guards import skip_update


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
    adamw = hooks.HOOKS.optimizer or torch.optim.AdamW  # the accelerations': torch's minus its dynamo import
    opt = adamw(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=1e-8)
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


def over_seconds(sched, cfg: OptimConfig, steps: int, seconds: float, clock) -> None:
    """Lay ``sched``'s schedule of ``steps`` steps over ``seconds`` of training time instead: its step is the share
    of the time spent (``clock()``, the stage's training seconds) times ``steps`` — warmup, then the decay to
    ``min_lr_ratio`` at ``seconds``, however fast the steps go."""
    f = lr_lambda(cfg, steps)
    sched.lr_lambdas = [lambda _step: f(min(steps, int(steps * clock() / max(seconds, 1e-9))))
                        for _ in sched.lr_lambdas]


def clip_grads(model, max_norm: float) -> float:
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return 0.0
    if max_norm and max_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    return float(torch.norm(torch.stack([p.grad.detach().norm() for p in params])))


def optimizer_step(model, opt, sched, max_grad_norm: float, loss: float | None = None) -> float:
    """Clip, step the optimizer and (when given) the schedule, clear grads; returns the grad norm.

    A non-finite ``loss`` or gradient skips the update (see :mod:`rlvr.trainers.guards`): the gradients
    are dropped, the schedule still advances, and the returned norm is NaN/inf so the step's record shows it."""
    if loss is not None and not math.isfinite(loss):
        skip_update([opt], sched)
        return float("nan")
    norm = clip_grads(model, max_grad_norm)  # the total norm is non-finite iff some gradient element is
    if not math.isfinite(norm):  # (the clip scaled the grads by a NaN factor: dropped with them)
        skip_update([opt], sched)
        return float("nan")
    opt.step()
    if sched is not None:
        sched.step()
    opt.zero_grad(set_to_none=True)
    return norm
