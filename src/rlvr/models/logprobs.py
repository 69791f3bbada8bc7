"""Per-token log-probabilities (and entropies) of a sequence under a causal LM.

Convention (glossary): for ``input_ids [B, T]`` the returned ``logprobs [B, T]`` hold
``log π(ids[t] | ids[<t])`` at position ``t`` and 0 at ``t = 0``; ``loss_mask`` selects the
completion tokens. Logits are divided by the sampling temperature so that training-time logprobs
match the sampling policy's.
"""

from __future__ import annotations

import contextlib

import torch

from rlvr.losses.entropy import entropy_from_logits as differentiable_entropy


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that ignore left padding: 0 at each sequence's first real token."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)


def gather_logprobs(logits: torch.Tensor, targets: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """log softmax(logits)[target] without materialising the full [N, V] log-softmax at once."""
    flat = logits.reshape(-1, logits.shape[-1])
    tgt = targets.reshape(-1)
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=flat.device)
    for s in range(0, flat.shape[0], chunk):
        lg = flat[s:s + chunk].float()
        out[s:s + chunk] = lg.gather(-1, tgt[s:s + chunk, None]).squeeze(-1) - torch.logsumexp(lg, -1)
    return out.view(targets.shape)


def entropy_from_logits(logits: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """Per-position entropy H = logsumexp(l) - Σ softmax(l)·l, chunked over positions."""
    flat = logits.reshape(-1, logits.shape[-1])
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=flat.device)
    for s in range(0, flat.shape[0], chunk):
        lg = flat[s:s + chunk].float()
        p = torch.softmax(lg, -1)
        out[s:s + chunk] = torch.logsumexp(lg, -1) - (p * lg).sum(-1)
    return out.view(logits.shape[:-1])


def autocast_ctx(enabled: bool, device_type: str = "cpu"):
    """bf16 autocast on ``device_type`` (cpu or cuda) when enabled."""
    return torch.autocast(device_type, dtype=torch.bfloat16) if enabled else contextlib.nullcontext()


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0,
                   with_entropy: bool = False, bf16: bool = False, entropy_grad: bool = False):
    """``(logprobs [B, T], entropy [B, T] or None)`` of each token given its prefix.

    ``entropy[:, t]`` is the entropy of the distribution token ``t`` was drawn from (0 at ``t = 0``). It is
    detached unless ``entropy_grad`` (an entropy bonus in the loss): then it is computed in checkpointed
    float32 row chunks (``rlvr.losses.entropy``) and carries the gradient.
    """
    with autocast_ctx(bf16, input_ids.device.type):
        out = model(input_ids=input_ids, attention_mask=attention_mask,
                    position_ids=position_ids_from_mask(attention_mask), use_cache=False)
    logits = out.logits[:, :-1]
    if temperature != 1.0:
        logits = logits / temperature
    lp = gather_logprobs(logits, input_ids[:, 1:])
    zeros = torch.zeros_like(lp[:, :1])
    logprobs = torch.cat([zeros, lp], dim=1)
    entropy = None
    if with_entropy and entropy_grad:
        entropy = torch.cat([zeros, differentiable_entropy(logits)], dim=1)
    elif with_entropy:
        with torch.no_grad():
            ent = entropy_from_logits(logits.detach())
        entropy = torch.cat([zeros, ent], dim=1)
    return logprobs, entropy
