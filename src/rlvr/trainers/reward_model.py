"""Reward model: a scalar head on the policy's backbone, trained with the Bradley-Terry loss on pairs.

Reads top to bottom: setup (the stage's starting policy) -> pairs (built by sampling that policy and
judging with the verifier, or read from a file) -> sequence classifier with the policy's backbone (or
the ``backbone:`` checkpoint's, e.g. a larger model sharing the tokenizer) and a fresh ``score`` head ->
steps (seeded data order; chosen and rejected in one concatenated forward; exact accumulation) ->
held-out pair accuracy -> ``final/`` loadable with ``AutoModelForSequenceClassification.from_pretrained``
(score = head on the last non-pad token).

The stage's checkpoint is the reward model, not a policy: ``StageResult.extra["policy"]`` (and
``final/rlvr_reward_model.json``) name the policy the stage started from, for the next stage to continue
from — PPO given a reward model folder as its ``init_path`` trains that policy against this reward model.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig
from rlvr.config.rlhf import RewardModelStage
from rlvr.data.jsonl import write_json_atomic
from rlvr.data.pair_builder import stage_pairs
from rlvr.data.preference import as_pairs, encode_pair
from rlvr.errors import ConfigError
from rlvr.losses.reward_model import bradley_terry, pairwise_accuracy
from rlvr.models.checkpoint import (
    latest_checkpoint,
    load_training_state,
    save_pretrained_atomic,
    seed_everything,
)
from rlvr.models.heads import add_lora_to_classifier, sequence_classifier_from_causal, sequence_rewards
from rlvr.models.load import disable_dropout, load_model_and_tokenizer
from rlvr.monitoring.evaluate import default_judge
from rlvr.monitoring.metrics import MetricsWriter, truncate_metrics_after
from rlvr.monitoring.progress import make_progress
from rlvr.trainers.common import build_optimizer, end_of_step, optimizer_step, pad_batch, stage_dir
from rlvr.trainers.preference_step import cache_logps
from rlvr.trainers.sft import StageResult, data_order

RM_MARKER = "rlvr_reward_model.json"  # in final/: marks a reward model and names the policy it started from


def score_pairs(rm, encs, pad_id: int, bf16: bool = False):
    """Chosen and rejected of the pairs in ONE concatenated forward -> (r_chosen [m], r_rejected [m])."""
    rows = [e.chosen_ids for e in encs] + [e.rejected_ids for e in encs]
    ids, att, _ = pad_batch(rows, pad_id, left=False, device=next(rm.parameters()).device)
    r = sequence_rewards(rm, ids, att, bf16)
    return r[:len(encs)], r[len(encs):]


def rm_step(rm, encs, idx: list[int], stage: RewardModelStage, pad_id: int, bf16: bool) -> dict:
    """Forward/backward one step's pairs in micro-batches; the loss is the mean over the step's pairs."""
    order = sorted(idx, key=lambda i: len(encs[i].chosen_ids) + len(encs[i].rejected_ids))
    agg: dict[str, float] = {}
    for s in range(0, len(order), stage.micro_batch_size):
        mb = order[s:s + stage.micro_batch_size]
        rc, rr = score_pairs(rm, [encs[i] for i in mb], pad_id, bf16)
        per, met = bradley_terry(rc, rr, margin=stage.margin or None, center_coef=stage.center_coef)
        loss = per.sum() / len(idx)
        loss.backward()
        met["train/loss"] = float(per.detach().mean())
        for k, v in met.items():
            agg[k] = agg.get(k, 0.0) + v * len(mb) / len(idx)
    return agg


@torch.no_grad()
def heldout_accuracy(rm, encs, pad_id: int, micro: int, bf16: bool = False) -> dict:
    """Held-out pair accuracy (r_chosen > r_rejected), mean margin and reward spread."""
    if not encs:
        return {}
    was = rm.training
    rm.eval()
    try:
        parts = [score_pairs(rm, encs[s:s + micro], pad_id, bf16) for s in range(0, len(encs), micro)]
    finally:
        rm.train(was)
    rc = torch.cat([p[0] for p in parts]).cpu()
    rr = torch.cat([p[1] for p in parts]).cpu()
    both = torch.cat([rc, rr])
    return {"heldout/accuracy": pairwise_accuracy(rc, rr), "heldout/margin": float((rc - rr).mean()),
            "heldout/reward_std": float(both.std()) if both.numel() > 1 else 0.0, "heldout/pairs": len(encs)}


def policy_logp_accuracy(policy, encs, pad_id: int, micro: int, bf16: bool = False) -> dict:
    """How often the starting policy's own summed log-likelihood ranks chosen above rejected.

    The yardstick for the reward model: what the language model already knows about the pairs. An RM
    below it has not learned to read that knowledge out through its scalar head (docs/preference.md).
    """
    if not encs:
        return {}
    rows = [(e.chosen_ids, e.chosen_mask) for e in encs] + [(e.rejected_ids, e.rejected_mask) for e in encs]
    lp = cache_logps(policy, rows, pad_id, 2 * micro, bf16)
    return {"heldout/policy_logp_accuracy": pairwise_accuracy(lp[:len(encs)], lp[len(encs):])}


def build_reward_model(model_cfg: ModelConfig, init_path: str | None, seed: int, backbone: str | None = None):
    """``(policy, reward model, tokenizer)``: the RM has the policy's backbone (or ``backbone``'s, which must
    share the policy's tokenizer: the RM scores the policy's token ids) and a fresh seeded head."""
    plain = model_cfg.model_copy(update={"lora": None})
    policy, tok = load_model_and_tokenizer(plain, init_path)
    source = policy
    if backbone is not None:
        source, btok = load_model_and_tokenizer(plain, backbone)
        if btok.get_vocab() != tok.get_vocab():
            raise ConfigError(f"reward_model.backbone: {backbone!r} has a different tokenizer from the policy "
                              f"({init_path or model_cfg.path or 'model.tiny'}); the reward model scores the "
                              "policy's token ids, so both must share one vocabulary")
    rm = sequence_classifier_from_causal(source, tok, seed=seed)
    if model_cfg.lora is not None:
        rm = add_lora_to_classifier(rm, model_cfg.lora)
    if not model_cfg.train_dropout:
        disable_dropout(rm)
    return policy, rm, tok


def train_reward_model(stage: RewardModelStage, model_cfg: ModelConfig, run_dir: str | Path, seed: int = 0,
                       init_path: str | None = None, resume: bool = False, eval_cfg: EvalConfig | None = None,
                       judge=None, crash_at_step: int | None = None) -> StageResult:
    """Train a Bradley-Terry reward model; returns where it is (``extra['policy']``: the policy passed on)."""
    out = stage_dir(run_dir, stage.name)
    seed_everything(seed)
    policy, rm, tok = build_reward_model(model_cfg, init_path, seed, stage.backbone)
    ckpt = latest_checkpoint(out / "checkpoints") if resume else None
    train_recs, held_recs, pair_stats = stage_pairs(stage.pairs, policy, tok, judge or default_judge(0), out,
                                                    seed, reuse=ckpt is not None)
    encs = [encode_pair(tok, p, stage.max_length) for p in as_pairs(train_recs, "the reward model")]
    held = [encode_pair(tok, p, stage.max_length) for p in as_pairs(held_recs, "the reward model")]
    baseline = policy_logp_accuracy(policy, held, tok.pad_token_id, stage.micro_batch_size,
                                    model_cfg.autocast_bf16) if ckpt is None else {}
    del policy
    n_steps = stage.max_steps or max(1, stage.epochs * math.ceil(len(encs) / stage.batch_size))
    rm.train()
    opt, sched = build_optimizer(rm, stage.optim, n_steps)
    bf16, pad = model_cfg.autocast_bf16, tok.pad_token_id
    step, train_s = 0, 0.0
    if ckpt is not None:
        st = load_training_state(ckpt, rm, opt, sched)
        step, train_s = st["step"], st.get("train_seconds", 0.0)
        truncate_metrics_after(out / "metrics.jsonl", step)
    writer = MetricsWriter(out / "metrics.jsonl")
    if ckpt is None:
        writer.log(0, {"event": "start", **{f"pairs/{k}": v for k, v in pair_stats.items()
                                           if isinstance(v, (int, float, str))},
                       **baseline, **heldout_accuracy(rm, held, pad, stage.micro_batch_size, bf16)})
    else:
        writer.log(step, {"event": "resume", "checkpoint": str(ckpt)})
    per_epoch = math.ceil(len(encs) / stage.batch_size)
    last: dict = {}
    with make_progress() as prog:
        bar = prog.add_task(f"rm:{stage.name}", total=n_steps, completed=step, info="")
        while step < n_steps:
            t0 = time.perf_counter()
            rec = rm_step(rm, encs, data_order(len(encs), seed, step, min(stage.batch_size, len(encs))), stage,
                          pad, bf16)
            rec["train/grad_norm"] = optimizer_step(rm, opt, sched, stage.optim.max_grad_norm)
            step += 1
            dt = time.perf_counter() - t0
            train_s += dt
            rec.update({"train/lr": sched.get_last_lr()[0], "perf/train_minutes": train_s / 60, "time/step": dt})
            if step % per_epoch == 0 or step == n_steps:
                rec.update(heldout_accuracy(rm, held, pad, stage.micro_batch_size, bf16))
            writer.log(step, rec)
            last.update(rec)
            prog.update(bar, advance=1, info=f"loss {rec['train/loss']:.3f} acc {rec['rm/accuracy']:.2f}")
            end_of_step(out, stage, step, n_steps, rm, tok, opt, sched, {"train_seconds": train_s},
                        crash_at_step)
    writer.close()
    final = save_pretrained_atomic(rm, tok, out / "final")
    write_json_atomic(final / RM_MARKER, {"policy": init_path, "backbone": stage.backbone or init_path,
                                          "heldout_accuracy": last.get("heldout/accuracy")})
    extra = {"kind": "reward_model", "policy": init_path, "pairs": pair_stats, **baseline,
             **{k: v for k, v in last.items() if k.startswith("heldout/")}}
    return StageResult(stage.name, str(final), str(out / "metrics.jsonl"), step, train_s, extra)
