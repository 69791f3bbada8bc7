"""PPO for language models (Ziegler et al., 2019; Ouyang et al., 2022): actor, critic, frozen reward
model (or the task's verifier as the reward), frozen reference.

Reads top to bottom: setup -> rollout (one sample per prompt) -> reward (RM score of prompt +
completion, or the verifier's reward; verifier infrastructure failures are dropped) -> evaluate the
batch under the sampling policy, the reference and the critic -> per-token reward
``r_t = -kl_coef * (logp_t - ref_logp_t) + [t last] R`` -> GAE(γ, λ) -> whitened advantages ->
``ppo_epochs`` x ``mini_batches`` updates of the clipped policy loss and the clipped value loss ->
adaptive KL coefficient toward ``target_kl`` -> log -> checkpoint.

Models:

* the **critic** is a separate model with a scalar head (a ``*ForSequenceClassification`` whose head is
  read at every position, see ``rlvr.models.heads``). With a reward model it starts as a copy of the
  reward model, whatever its size (InstructGPT); with the verifier as the reward it
  starts from the policy's backbone with a zero head (V = 0 at first, so early advantages are the
  returns rather than a random head's noise). It has its own optimiser (``critic_optim``).
* the **reference** is a frozen copy of the starting policy; under LoRA it is the base with adapters
  disabled (no copy).
* the **reward model** is loaded frozen from ``reward_model_path``; by default from ``init_path`` when
  that is a reward_model stage's output (then the policy is the one that stage started from), else
  from ``run_dir/reward_model/final``.

Every random draw is seeded by (seed, step); a checkpoint holds the actor, the critic, both optimisers,
the task cursor, the KL coefficient and the health history, so a resumed run continues the same trajectory.
"""

from __future__ import annotations

import copy
import math
from functools import partial
from pathlib import Path

import numpy as np
import torch

from rlvr.advantages.gae import gae, token_rewards, whiten
from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig
from rlvr.config.rl import RewardTerm
from rlvr.config.rlhf import PPOStage
from rlvr.data.chat import encode_prompt
from rlvr.data.collate import TokenBatch, pad_batch
from rlvr.data.order import TaskStream, minibatch_rows
from rlvr.data.sources import load_task_source
from rlvr.errors import ConfigError
from rlvr.losses.kl import adaptive_kl_coef, kl_penalty
from rlvr.losses.value import explained_variance
from rlvr.models.checkpoint import save_pretrained_atomic, seed_everything
from rlvr.models.heads import (
    backbone_and_head,
    load_reward_model,
    reward_model_marker,
    sequence_classifier_from_causal,
    sequence_rewards,
    token_values,
)
from rlvr.models.load import load_model_and_tokenizer
from rlvr.models.prefix_share import shared_prefixes
from rlvr.models.truncation import Truncation
from rlvr.monitoring.metrics import PhaseTimer
from rlvr.rollout.collector import collect
from rlvr.rollout.hf_engine import HFEngine
from rlvr.trainers.common import (
    StageResult,
    accumulate,
    build_optimizer,
    clip_grads,
    close_stage,
    find_checkpoint,
    frozen_reference,
    log_step,
    open_stage,
    pause_on_infra,
    set_train_mode,
    stage_dir,
)
from rlvr.trainers.guards import grads_finite, skip_update
from rlvr.trainers.micro_loss import ppo_micro_loss
from rlvr.trainers.update import (
    first_update_micros,
    recompute_old_logprobs,
    reference_logprobs,
    reference_micros,
    update_micro_batches,
)
from rlvr.verifiers.judge import default_judge

CORRECT = [RewardTerm()]  # the verifier's reward (logged as the pass rate even when an RM scores)


# ------------------------------------------------------------------------------------------ setup

def resolve_paths(stage: PPOStage, run_dir: str | Path, init_path: str | None) -> tuple[str | None, str | None]:
    """``(policy init path, reward model path or None)``.

    When ``init_path`` is a reward_model stage's output (a pipeline passes the previous stage's
    checkpoint), the policy is the one that stage started from and the reward model defaults to it.
    Otherwise the reward model defaults to ``run_dir/reward_model/final``; a clear error when missing.
    """
    marker = reward_model_marker(init_path)
    rm_default = init_path if marker is not None else str(Path(run_dir) / "reward_model" / "final")
    policy = marker["policy"] if marker is not None else init_path
    if stage.reward != "reward_model":
        return policy, None
    path = stage.reward_model_path or rm_default
    if not (Path(path) / "config.json").exists():
        raise ConfigError(f"stage {stage.name!r}: reward: reward_model, but no reward model at {path!r}; set "
                          "reward_model_path or run a reward_model stage first (`rlvr rm RECIPE`)")
    return policy, path


def setup_models(stage: PPOStage, model_cfg: ModelConfig, run_dir, init_path, seed: int):
    """``(policy, tok, reference or None (LoRA), critic, reward model or None, rm tokenizer or None)``."""
    init_path, rm_path = resolve_paths(stage, run_dir, init_path)
    policy, tok = load_model_and_tokenizer(model_cfg, init_path)
    set_train_mode(policy, model_cfg)
    ref = frozen_reference(policy, True, model_cfg.train_bf16)
    rm, rm_tok = None, None
    if rm_path is not None:
        rm, rm_tok = load_reward_model(rm_path)
        rm = rm.to(next(policy.parameters()).device)
    if rm is not None and rm_tok.get_vocab() == tok.get_vocab():
        critic = copy.deepcopy(rm)
    else:
        critic = sequence_classifier_from_causal(policy, tok, seed=seed + 1)
        _, head = backbone_and_head(critic)
        torch.nn.init.zeros_(head.weight)          # V = 0 at the start: the first advantages are the returns
    critic = critic.float()  # trained in full: fp32 master weights even over a bf16 base
    set_train_mode(critic, model_cfg)
    for p in critic.parameters():
        p.requires_grad_(True)
    return policy, tok, ref, critic, rm, rm_tok


# ----------------------------------------------------------------------------------------- update

@torch.no_grad()
def rm_scores(rm, rm_tok, policy_tok, tasks, prompt_ids, completion_ids, texts, micro: int) -> torch.Tensor:
    """Reward-model scores ``[B]`` of prompt + completion (re-tokenised if the RM's tokenizer differs)."""
    if rm_tok.get_vocab() == policy_tok.get_vocab():
        rows = [p + c for p, c in zip(prompt_ids, completion_ids)]
    else:
        rows = [encode_prompt(rm_tok, t) + rm_tok(x, add_special_tokens=False)["input_ids"]
                for t, x in zip(tasks, texts)]
    out = []
    dev = next(rm.parameters()).device
    for s in range(0, len(rows), micro):
        ids, att, _ = pad_batch(rows[s:s + micro], rm_tok.pad_token_id, left=False, device=dev)
        out.append(sequence_rewards(rm, ids, att).cpu())
    return torch.cat(out).float()


def build_batch(ro, rewards: torch.Tensor, valid: torch.Tensor, pad_id: int,
                device=None) -> tuple[TokenBatch, list[int]]:
    """Keep valid rows with a non-empty completion, with the sampler's logprobs as ``old_logprobs`` (until
    :func:`evaluate_batch` recomputes them); returns the batch (on ``device``) and the kept rows."""
    keep = [i for i in range(len(ro.completion_ids)) if bool(valid[i]) and ro.completion_ids[i]]
    if not keep:
        return TokenBatch.empty(), keep
    seqs = [ro.prompt_ids[i] + ro.completion_ids[i] for i in keep]
    masks = [[0] * len(ro.prompt_ids[i]) + [1] * len(ro.completion_ids[i]) for i in keep]
    old = [[0.0] * len(ro.prompt_ids[i]) + list(ro.old_logprobs[i]) for i in keep]
    b = TokenBatch.from_rows(seqs, masks, pad_id, device=device, old_logprobs=old, group_ids=keep)
    b.rewards = rewards[keep].float().to(b.input_ids.device)
    return b, keep


@torch.no_grad()
def critic_values(critic, b: TokenBatch, micros: list[list[int]], bf16: bool) -> torch.Tensor:
    """The critic's values ``[B, T]`` of the batch's rows over ``micros`` (row ids), 0 off the loss mask."""
    vals = torch.zeros(b.input_ids.shape, device=b.input_ids.device)
    for rows in micros:
        mb = b.rows(rows)
        vals[rows, :mb.input_ids.shape[1]] = token_values(critic, mb.input_ids, mb.attention_mask, bf16)
    return vals * b.loss_mask


def evaluate_batch(b: TokenBatch, policy, ref, critic, stage: PPOStage, bf16: bool, seed: int = 0, step: int = 0,
                   micro_tokens: int | str | None = "auto") -> dict:
    """Fill the batch's old logprobs (the training forward under no grad, in the training precision and the
    sampling's top-k / top-p truncation; the sampler's move to ``sampler_logprobs``), reference logprobs (LoRA:
    adapters off) and values with the RL stage's update engine (``trainers/update.py``), the old logprobs and
    values on the micro-batches of the first epoch's updates: the ratio and the value clip start at exactly 1
    and 0 even where kernels round by batch shape (the reference pass: ``reference_micros``). Returns the
    sampler-vs-trainer mismatch (``rollout/logprob_mismatch_*``)."""
    first = minibatch_rows(len(b), stage.mini_batches, 1, seed, step)[0]
    micros = first_update_micros(policy, b, first, stage.micro_batch_size, micro_tokens)
    met = recompute_old_logprobs(policy, b, stage, bf16, micros, micro_tokens)
    b.ref_logprobs = reference_logprobs(ref, policy, b, stage.sampling.temperature, stage.micro_batch_size, bf16,
                                        reference_micros(policy, b, first, stage.micro_batch_size, micro_tokens),
                                        Truncation.of(stage.sampling))
    b.values = critic_values(critic, b, micros, bf16)
    return met


def compute_advantages(b: TokenBatch, kl_coef: float, gamma: float, lam: float, whiten_adv: bool) -> dict:
    """KL-in-reward (k1 per token), GAE(γ, λ) and optional whitening; returns rollout-side metrics."""
    lm = b.loss_mask
    kl = kl_penalty(b.old_logprobs, b.ref_logprobs, kind="k1", loss_mask=lm)
    tok_r = token_rewards(b.rewards, lm, kl, kl_coef)
    adv, ret = gae(tok_r, b.values, lm, gamma, lam)
    b.advantages = whiten(adv, lm) if whiten_adv else adv
    b.returns = ret
    seq_kl = (kl * lm).sum(dim=1)
    return {"kl/ref": float(seq_kl.mean()), "kl/ref_per_token": float((kl * lm).sum() / lm.sum().clamp(min=1)),
            "reward/with_kl_mean": float(tok_r.sum(dim=1).mean()),
            "value/explained_variance": explained_variance(b.values, ret, lm),
            "advantage/mean_raw": float((adv * lm).sum() / lm.sum().clamp(min=1))}


def ppo_update(b: TokenBatch, policy, critic, opts, scheds, cfg, seed: int, step: int, bf16: bool,
               micro_tokens: int | str | None = "auto") -> dict:
    """``ppo_epochs`` x ``mini_batches`` optimizer steps on both the actor and the critic, with the RL stage's
    seeded mini-batch shuffle (``minibatch_rows``), micro-batch plan (``update_micro_batches``) and accumulation
    loop (``accumulate``) around PPO's micro-batch loss (``micro_loss.ppo_micro_loss``); a mini-batch with a
    non-finite loss or gradient updates neither model."""
    (popt, copt), (psched, csched) = opts, scheds
    agg: dict[str, float] = {}
    tokens = 0.0
    skipped, updates = 0, 0
    for epoch_minis in minibatch_rows(len(b), cfg.mini_batches, cfg.ppo_epochs, seed, step):
        for mini in epoch_minis:
            denom = float(b.loss_mask[mini].sum().clamp(min=1))
            with shared_prefixes() as prefix:  # a group's prompt forwarded once (rlvr.models.prefix_share)
                met = accumulate(update_micro_batches(policy, b, mini, cfg.micro_batch_size, micro_tokens),
                                 partial(ppo_micro_loss, policy, critic, b, cfg, denom, bf16, prefix=prefix),
                                 len(mini))
            if not math.isfinite(met.pop("train/loss")) or not grads_finite(policy, critic):
                skip_update((popt, copt))  # a non-finite mini-batch: no update at all
                skipped += 1
                continue
            tokens += met.pop("tokens_sum")
            for k, v in met.items():
                agg[k.removesuffix("_sum")] = agg.get(k.removesuffix("_sum"), 0.0) + v
            agg["train/grad_norm"] = agg.get("train/grad_norm", 0.0) + clip_grads(policy, cfg.optim.max_grad_norm)
            copt_cfg = cfg.critic_optim or cfg.optim
            agg["critic/grad_norm"] = agg.get("critic/grad_norm", 0.0) + clip_grads(critic, copt_cfg.max_grad_norm)
            popt.step(), copt.step()
            popt.zero_grad(set_to_none=True), copt.zero_grad(set_to_none=True)
            updates += 1
    psched.step(), csched.step()
    out = {k: v / max(tokens, 1.0) for k, v in agg.items() if not k.endswith("grad_norm")}
    out.update({k: v / max(updates, 1) for k, v in agg.items() if k.endswith("grad_norm")})
    out["train/updates"] = updates
    out["train/nonfinite_skipped"] = skipped  # mini-batch updates skipped for a NaN/inf loss or gradient
    return out


# ------------------------------------------------------------------------------------------ rollout

def rollout_and_score(stage, engine, tok, tasks, judge, rm, rm_tok, seed: int, step: int):
    """One completion per task (the GRPO family's collector with G = 1), scored by the reward model or the
    verifier; returns (rollouts, rewards [B], valid [B], metrics). The verifier always runs (pass rate)."""
    ro = collect(engine, tok, tasks, judge, stage.sampling, CORRECT, seed=seed * 100003 + step * 97)
    valid = ro.valid.reshape(-1)
    met = {"rollout/pass_rate": float(ro.passed.float().mean()), "verifier/infra": int((~valid).sum()),
           "time/generate": ro.seconds.get("generate", 0.0), "time/verify": ro.seconds.get("verify", 0.0)}
    if rm is None:
        return ro, ro.rewards.reshape(-1), valid, met
    scores = rm_scores(rm, rm_tok, tok, tasks, ro.prompt_ids, ro.completion_ids, ro.texts, stage.micro_batch_size)
    return ro, scores, torch.ones(len(scores), dtype=torch.bool), met


# ---------------------------------------------------------------------------------------- trainer

def train_ppo(stage: PPOStage, model_cfg: ModelConfig, run_dir: str | Path, seed: int = 0,
              init_path: str | None = None, resume: bool = False, eval_cfg: EvalConfig | None = None,
              judge=None, crash_at_step: int | None = None) -> StageResult:
    """Run a PPO stage; returns where the final actor is (the critic goes to ``<stage>/critic``)."""
    out = stage_dir(run_dir, stage.name)
    seed_everything(seed)
    policy, tok, ref, critic, rm, rm_tok = setup_models(stage, model_cfg, run_dir, init_path, seed)
    judge = judge or default_judge(stage.verifier_workers)
    engine = HFEngine(policy, tok, bf16=model_cfg.decode_bf16)
    stream = TaskStream(load_task_source(stage.data), seed)
    popt, psched = build_optimizer(policy, stage.optim, stage.max_steps)
    copt, csched = build_optimizer(critic, stage.critic_optim or stage.optim, stage.max_steps)
    run = open_stage(stage, out, policy, tok, popt, psched, stage.max_steps, checkpoint=find_checkpoint(out, resume),
                     eval_cfg=eval_cfg, judge=judge, health=stage.health, crash_at_step=crash_at_step,
                     start={"reward": stage.reward, "reference": "base (adapters disabled)" if ref is None
                            else "frozen copy"})
    kl_coef = run.state.get("kl_coef", stage.kl.beta)
    stream.cursor = run.state.get("cursor", 0)
    if "critic" in run.state:
        critic.load_state_dict(run.state["critic"])
        copt.load_state_dict(run.state["critic_optimizer"])
        csched.load_state_dict(run.state["critic_scheduler"])
    bf16, micro_tokens = model_cfg.train_bf16, model_cfg.micro_tokens
    while not run.done():
        phase = PhaseTimer()
        with phase("rollout"):  # generate + verify (+ the reward model's scores): time/generate, time/verify inside
            tasks = stream.take(stage.tasks_per_step)
            ro, rewards, valid, rmet = rollout_and_score(stage, engine, tok, tasks, judge, rm, rm_tok, seed, run.step)
            batch, _ = build_batch(ro, rewards, valid, tok.pad_token_id, device=next(policy.parameters()).device)
        rec = {**rmet, "reward/mean": float(rewards[valid].mean()) if bool(valid.any()) else 0.0,
               "reward/std": float(rewards[valid].std()) if int(valid.sum()) > 1 else 0.0,
               "rollout/length_mean": float(np.mean([len(c) for c in ro.completion_ids])),
               "rollout/truncation_rate": float(np.mean([r == "length" for r in ro.finish_reason])),
               "kl/coef": kl_coef, "train/sequences": len(batch)}
        pause_on_infra(run, rec, len(tasks), ro.reward_errors)
        if len(batch):
            with phase("ref"):  # π_old, the reference and the critic's values
                rec.update(evaluate_batch(batch, policy, ref, critic, stage, bf16, seed, run.step, micro_tokens))
            with phase("advantages"):
                rec.update(compute_advantages(batch, kl_coef, stage.gamma, stage.lam, stage.whiten_advantages))
            with phase("train"):
                rec.update(ppo_update(batch, policy, critic, (popt, copt), (psched, csched), stage, seed, run.step,
                                      bf16, micro_tokens))
            if stage.kl.target is not None:
                kl_coef = adaptive_kl_coef(kl_coef, rec["kl/ref"], stage.kl.target, len(batch), stage.kl.horizon)
        else:
            psched.step(), csched.step()
        rec.update(phase.metrics())
        state = {"cursor": stream.cursor, "kl_coef": kl_coef, "critic": critic.state_dict(),
                 "critic_optimizer": copt.state_dict(), "critic_scheduler": csched.state_dict()}
        if log_step(run, rec, state, info=f"reward {rec['reward/mean']:.3f} kl {rec.get('kl/ref', 0.0):.2f}",
                     ids=[t.id for t in tasks]):
            break
    save_pretrained_atomic(critic, tok, out / "critic")
    return close_stage(run, extra={"critic": str(out / "critic"), "kl_coef": kl_coef, "reward": stage.reward})
