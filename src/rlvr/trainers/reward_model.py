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
from pathlib import Path

import torch

from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig
from rlvr.config.rlhf import RewardModelStage
from rlvr.data.collate import pad_batch
from rlvr.data.jsonl import write_json_atomic
from rlvr.data.order import data_order
from rlvr.data.preference import as_pairs, encode_pair
from rlvr.errors import ConfigError
from rlvr.losses.reward_model import bradley_terry, pairwise_accuracy
from rlvr.models.checkpoint import seed_everything
from rlvr.models.heads import (
    RM_MARKER,
    add_lora_to_classifier,
    sequence_classifier_from_causal,
    sequence_rewards,
)
from rlvr.models.load import disable_dropout, load_model_and_tokenizer
from rlvr.models.logprobs import cached_sequence_logprobs
from rlvr.rollout.pairs import stage_pairs
from rlvr.trainers.common import (
    StageResult,
    accumulate,
    build_optimizer,
    close_stage,
    find_checkpoint,
    log_step,
    open_stage,
    optimizer_step,
    stage_dir,
)
from rlvr.verifiers.judge import default_judge


def score_pairs(rm, encs, pad_id: int, bf16: bool = False):
    """Chosen and rejected of the pairs in ONE concatenated forward -> (r_chosen [m], r_rejected [m])."""
    rows = [e.chosen_ids for e in encs] + [e.rejected_ids for e in encs]
    ids, att, _ = pad_batch(rows, pad_id, left=False, device=next(rm.parameters()).device)
    r = sequence_rewards(rm, ids, att, bf16)
    return r[:len(encs)], r[len(encs):]


def rm_step(rm, encs, idx: list[int], stage: RewardModelStage, pad_id: int, bf16: bool) -> dict:
    """Forward/backward one step's pairs in micro-batches; the loss is the mean over the step's pairs."""
    order = sorted(idx, key=lambda i: len(encs[i].chosen_ids) + len(encs[i].rejected_ids))

    def forward(mb):
        rc, rr = score_pairs(rm, [encs[i] for i in mb], pad_id, bf16)
        per, met = bradley_terry(rc, rr, margin=stage.margin or None, center_coef=stage.center_coef)
        return per.sum() / len(idx), met
    micros = [order[s:s + stage.micro_batch_size] for s in range(0, len(order), stage.micro_batch_size)]
    return accumulate(micros, forward, len(idx))


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


def policy_logp_accuracy(policy, encs, pad_id: int, micro: int, bf16: bool = False,
                         micro_tokens: int | str | None = "auto") -> dict:
    """How often the starting policy's own summed log-likelihood ranks chosen above rejected.

    The yardstick for the reward model: what the language model already knows about the pairs. An RM
    below it has not learned to read that knowledge out through its scalar head (docs/preference.md).
    """
    if not encs:
        return {}
    rows = [(e.chosen_ids, e.chosen_mask) for e in encs] + [(e.rejected_ids, e.rejected_mask) for e in encs]
    lp = cached_sequence_logprobs(policy, rows, pad_id, 2 * micro, bf16, micro_tokens)
    return {"heldout/policy_logp_accuracy": pairwise_accuracy(lp[:len(encs)], lp[len(encs):])}


def build_reward_model(model_cfg: ModelConfig, init_path: str | None, seed: int, backbone: str | None = None):
    """``(policy, reward model, tokenizer)``: the RM has the policy's backbone (or ``backbone``'s, which must
    share the policy's tokenizer: the RM scores the policy's token ids) and a fresh seeded head."""
    plain = model_cfg.model_copy(update={"lora": None})
    policy, tok = load_model_and_tokenizer(plain, init_path)
    model_cfg.resolve_precision(policy)  # autocast_bf16: auto (decided on the copy's load)
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
    ckpt = find_checkpoint(out, resume)
    train_recs, held_recs, pair_stats = stage_pairs(stage.pairs, policy, tok, judge or default_judge(0), out,
                                                    seed, reuse=ckpt is not None)
    encs = [encode_pair(tok, p, stage.max_length) for p in as_pairs(train_recs, "the reward model")]
    held = [encode_pair(tok, p, stage.max_length) for p in as_pairs(held_recs, "the reward model")]
    bf16, pad, micro = model_cfg.train_bf16, tok.pad_token_id, stage.micro_batch_size
    baseline = policy_logp_accuracy(policy, held, pad, micro, bf16, model_cfg.micro_tokens) if ckpt is None else {}
    del policy
    n_steps = stage.max_steps or max(1, stage.epochs * math.ceil(len(encs) / stage.batch_size))
    rm.train()
    opt, sched = build_optimizer(rm, stage.optim, n_steps)
    start = {**{f"pairs/{k}": v for k, v in pair_stats.items() if isinstance(v, (int, float, str))}, **baseline}
    if ckpt is None:
        start.update(heldout_accuracy(rm, held, pad, micro, bf16))
    run = open_stage(stage, out, rm, tok, opt, sched, n_steps, checkpoint=ckpt, crash_at_step=crash_at_step,
                     start=start, label="rm")
    per_epoch = math.ceil(len(encs) / stage.batch_size)
    while not run.done():
        idx = data_order(len(encs), seed, run.step, min(stage.batch_size, len(encs)))
        rec = rm_step(rm, encs, idx, stage, pad, bf16)
        rec["train/grad_norm"] = optimizer_step(rm, opt, sched, stage.optim.max_grad_norm, rec["train/loss"])
        if (run.step + 1) % per_epoch == 0 or run.step + 1 == n_steps:
            rec.update(heldout_accuracy(rm, held, pad, micro, bf16))
        log_step(run, rec, info=f"loss {rec['train/loss']:.3f} acc {rec['rm/accuracy']:.2f}",
                 ids=[f"row {i}" for i in idx])
    result = close_stage(run)
    write_json_atomic(Path(result.checkpoint) / RM_MARKER, {"policy": init_path, "backbone": stage.backbone or init_path,
                                                           "heldout_accuracy": run.last.get("heldout/accuracy")})
    result.extra = {"kind": "reward_model", "policy": init_path, "pairs": pair_stats, **baseline,
                    **{k: v for k, v in run.last.items() if k.startswith("heldout/")}}
    return result
