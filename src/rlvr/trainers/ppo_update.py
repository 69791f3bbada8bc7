"""The pieces of one PPO step: score the rollouts (reward model or verifier), evaluate them under the
policy, the frozen reference and the critic, turn rewards into per-token advantages (KL-in-reward,
GAE, whitening), and run the clipped policy + clipped value update over epochs x mini-batches with
exact token-mean accumulation over micro-batches."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rlvr.advantages.gae import gae, token_rewards, whiten
from rlvr.data.chat import encode_prompt
from rlvr.losses.kl import kl_penalty
from rlvr.losses.policy import clipped_surrogate
from rlvr.losses.value import clipped_value_loss, explained_variance
from rlvr.models.heads import sequence_rewards, token_values
from rlvr.models.logprobs import token_logprobs
from rlvr.trainers.common import clip_grads, logprob_mismatch, pad_batch
from rlvr.verifiers.base import INFRA_OUTCOMES


@dataclass
class PPOBatch:
    """A scored rollout batch, right-padded to ``[B, T]``."""

    ids: torch.Tensor
    att: torch.Tensor
    loss_mask: torch.Tensor
    rewards: torch.Tensor          # [B] task reward (RM score or verifier reward)
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.ids.shape[0]


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


def build_batch(gen, rewards: torch.Tensor, valid: torch.Tensor, pad_id: int,
                device=None) -> tuple[PPOBatch, list[int]]:
    """Keep valid rows with a non-empty completion; returns the batch (on ``device``) and the kept rows."""
    keep = [i for i in range(len(gen.completion_ids)) if bool(valid[i]) and gen.completion_ids[i]]
    if not keep:
        return PPOBatch(torch.zeros(0, 1, dtype=torch.long), torch.zeros(0, 1, dtype=torch.long),
                        torch.zeros(0, 1), torch.zeros(0)), keep
    seqs = [gen.prompt_ids[i] + gen.completion_ids[i] for i in keep]
    masks = [[0] * len(gen.prompt_ids[i]) + [1] * len(gen.completion_ids[i]) for i in keep]
    ids, att, lm = pad_batch(seqs, pad_id, masks, left=False, device=device)
    return PPOBatch(ids, att, lm, rewards[keep].float().to(ids.device)), keep


def verifier_rewards(verdicts) -> tuple[torch.Tensor, torch.Tensor]:
    """``(reward [B], valid [B])``: infrastructure failures are not rewards, they are dropped."""
    rewards = torch.tensor([float(v.reward) for v in verdicts])
    valid = torch.tensor([v.outcome not in INFRA_OUTCOMES for v in verdicts])
    return rewards, valid


def _micro_slices(rows: list[int], micro: int):
    return [rows[s:s + micro] for s in range(0, len(rows), micro)]


def _trim(b: PPOBatch, rows: list[int], *tensors):
    """Rows of the batch cut to their longest sequence (right padding)."""
    T = int(b.att[rows].sum(dim=1).max())
    return [t[rows, :T] for t in tensors]


@torch.no_grad()
def evaluate_batch(b: PPOBatch, policy, ref, critic, temperature: float, micro: int, bf16: bool) -> None:
    """Fill old logprobs (the training forward under no grad, in the training precision: the ratio starts
    at exactly 1), reference logprobs (LoRA: adapters off) and values."""
    old, refl, vals = (torch.zeros(b.ids.shape, device=b.ids.device) for _ in range(3))
    for rows in _micro_slices(list(range(len(b))), micro):
        ids, att = _trim(b, rows, b.ids, b.att)
        T = ids.shape[1]
        old[rows, :T] = token_logprobs(policy, ids, att, temperature, bf16=bf16)[0].float()
        if ref is None:
            with policy.disable_adapter():
                refl[rows, :T] = token_logprobs(policy, ids, att, temperature, bf16=bf16)[0].float()
        else:
            refl[rows, :T] = token_logprobs(ref, ids, att, temperature, bf16=bf16)[0].float()
        vals[rows, :T] = token_values(critic, ids, att, bf16)
    b.old_logprobs, b.ref_logprobs, b.values = old, refl, vals * b.loss_mask


def sampler_mismatch(b: PPOBatch, gen, keep: list[int]) -> dict:
    """``rollout/logprob_mismatch_{mean,max}``: the sampler's logprobs against the training forward's
    ``old_logprobs`` (which the update uses), over the completion tokens of the batch's rows."""
    trainer, sampler, masks = [], [], []
    for r, i in enumerate(keep):
        P, n = len(gen.prompt_ids[i]), len(gen.completion_ids[i])
        trainer.append(b.old_logprobs[r, P:P + n].tolist())
        sampler.append(gen.old_logprobs[i])
        masks.append([1] * n)
    return logprob_mismatch(trainer, sampler, masks)


def compute_advantages(b: PPOBatch, kl_coef: float, gamma: float, lam: float, whiten_adv: bool) -> dict:
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


def micro_loss(b: PPOBatch, rows, policy, critic, cfg, denom: float, bf16: bool):
    """Token-sum of the clipped policy loss + vf_coef x clipped value loss, divided by the mini-batch's tokens."""
    ids, att, lm, old, adv, v_old, ret = _trim(b, rows, b.ids, b.att, b.loss_mask, b.old_logprobs,
                                               b.advantages, b.values, b.returns)
    logprobs, entropy = token_logprobs(policy, ids, att, cfg.temperature, with_entropy=True, bf16=bf16)
    pg, pmet = clipped_surrogate(logprobs, old, adv, lm, cfg.clip_eps, cfg.clip_eps)
    values = token_values(critic, ids, att, bf16)
    vf, vmet = clipped_value_loss(values, v_old, ret, lm, cfg.value_clip)
    pg_sum, vf_sum = (pg * lm).sum(), (vf * lm).sum()
    loss = (pg_sum + cfg.vf_coef * vf_sum) / denom
    n = float(lm.sum())
    met = {**pmet, "value/clip_frac": vmet["value/clip_frac"], "value/mse": vmet["value/mse"],
           "policy/loss": float(pg_sum.detach()) / max(n, 1), "value/loss": float(vf_sum.detach()) / max(n, 1),
           "policy/entropy": float((entropy * lm).sum()) / max(n, 1)}
    return loss, met, n


def ppo_update(b: PPOBatch, policy, critic, opts, scheds, cfg, seed: int, step: int, bf16: bool) -> dict:
    """``ppo_epochs`` x ``mini_batches`` optimizer steps on both the actor and the critic."""
    (popt, copt), (psched, csched) = opts, scheds
    agg: dict[str, float] = {}
    tokens = 0.0
    skipped, updates = 0, 0
    for epoch in range(cfg.ppo_epochs):
        perm = np.random.default_rng([seed, step, epoch]).permutation(len(b)).tolist()
        size = -(-len(b) // cfg.mini_batches)
        for s in range(0, len(b), size):
            mini = perm[s:s + size]
            denom = float(b.loss_mask[mini].sum().clamp(min=1))
            for rows in _micro_slices(mini, cfg.micro_batch_size):
                loss, met, n = micro_loss(b, rows, policy, critic, cfg, denom, bf16)
                if not torch.isfinite(loss):
                    skipped += 1
                    continue
                loss.backward()
                tokens += n
                for k, v in met.items():
                    agg[k] = agg.get(k, 0.0) + v * n
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
    out["train/nonfinite_skipped"] = skipped
    return out
