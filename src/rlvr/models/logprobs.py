"""Per-token log-probabilities (and entropies) of a sequence under a causal LM.

Convention (glossary): for ``input_ids [B, T]`` the returned ``logprobs [B, T]`` hold
``log π(ids[t] | ids[<t])`` at position ``t`` and 0 at ``t = 0``; ``loss_mask`` selects the
completion tokens. Logits are upcast to float32, then divided by the sampling temperature, so that
training-time logprobs match the sampling policy's (the engine samples from ``log_softmax(float(z) / T)``).
"""

from __future__ import annotations

import contextlib

import torch

from rlvr import hooks
from rlvr.losses.entropy import entropy_from_logits as differentiable_entropy
from rlvr.models.truncation import NONE, Truncation, truncated_logprobs


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that ignore left padding: 0 at each sequence's first real token."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)


def _scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits / T`` computed in float32: upcast first (bf16 logits divided in bf16 lose ~3 digits)."""
    lg = logits.float()
    return lg if temperature == 1.0 else lg / temperature


def gather_logprobs(logits: torch.Tensor, targets: torch.Tensor, chunk: int = 4096,
                    temperature: float = 1.0, truncation: Truncation = NONE) -> torch.Tensor:
    """log softmax(logits / T)[target] in float32 (``truncation``: of the top-k / top-p distribution the sampler
    drew from, ``rlvr.models.truncation``), without materialising the full [N, V] log-softmax."""
    flat = logits.reshape(-1, logits.shape[-1])
    tgt = targets.reshape(-1)
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=flat.device)
    for s in range(0, flat.shape[0], chunk):
        out[s:s + chunk] = truncated_logprobs(_scaled(flat[s:s + chunk], temperature), tgt[s:s + chunk], truncation)
    return out.view(targets.shape)


def entropy_from_logits(logits: torch.Tensor, chunk: int = 4096, temperature: float = 1.0) -> torch.Tensor:
    """Per-position entropy of softmax(l / T), H = logsumexp(l) - Σ softmax(l)·l, chunked over positions."""
    flat = logits.reshape(-1, logits.shape[-1])
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=flat.device)
    for s in range(0, flat.shape[0], chunk):
        lg = _scaled(flat[s:s + chunk], temperature)
        p = torch.softmax(lg, -1)
        out[s:s + chunk] = torch.logsumexp(lg, -1) - (p * lg).sum(-1)
    return out.view(logits.shape[:-1])


def autocast_ctx(enabled: bool, device_type: str = "cpu"):
    """bf16 autocast on ``device_type`` (cpu or cuda) when enabled."""
    return torch.autocast(device_type, dtype=torch.bfloat16) if enabled else contextlib.nullcontext()


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0,
                   with_entropy: bool = False, bf16: bool = False, entropy_grad: bool = False,
                   wanted: torch.Tensor | None = None, packed: bool | None = None, truncation: Truncation = NONE):
    """``(logprobs [B, T], entropy [B, T] or None)`` of each token given its prefix.

    ``truncation`` (top-k / top-p of the sampling): the logprobs are those of the renormalised truncated
    distribution the sampler drew from (``rlvr.models.truncation``); the entropy stays the full tempered
    distribution's.

    ``entropy[:, t]`` is the entropy of the distribution token ``t`` was drawn from (0 at ``t = 0``). It is
    detached unless ``entropy_grad`` (an entropy bonus in the loss): then it is computed in checkpointed
    float32 row chunks (``rlvr.losses.entropy``) and carries the gradient.

    Models the ``forward`` hook supports (``rlvr.hooks``; the accelerations' padding-free packed forward) take
    it (``packed``: None = when supported); the values at a real token with a real predecessor are the HF
    forward's, and 0 elsewhere (padding, each row's first token, and, given ``wanted [B, T]``, every
    position outside it: the logits there are not computed).
    """
    if temperature <= 0:
        raise ValueError(f"token_logprobs: temperature must be > 0, got {temperature}")
    if packed is None:
        packed = hooks.packed_forward(model)
    if packed:
        return _packed_token_logprobs(model, input_ids, attention_mask, temperature, with_entropy, bf16,
                                      entropy_grad, wanted, truncation)
    with autocast_ctx(bf16, input_ids.device.type):
        out = model(input_ids=input_ids, attention_mask=attention_mask,
                    position_ids=position_ids_from_mask(attention_mask), use_cache=False)
    logits = out.logits[:, :-1]
    lp = gather_logprobs(logits, input_ids[:, 1:], temperature=temperature, truncation=truncation)
    zeros = torch.zeros_like(lp[:, :1])
    logprobs = torch.cat([zeros, lp], dim=1)
    entropy = None
    if with_entropy and entropy_grad:
        entropy = torch.cat([zeros, differentiable_entropy(_scaled(logits, temperature))], dim=1)
    elif with_entropy:
        with torch.no_grad():
            ent = entropy_from_logits(logits.detach(), temperature=temperature)
        entropy = torch.cat([zeros, ent], dim=1)
    return logprobs, entropy


def _packed_token_logprobs(model, input_ids, attention_mask, temperature, with_entropy, bf16, entropy_grad,
                           wanted, truncation: Truncation = NONE):
    """:func:`token_logprobs` on the ``forward`` hook's packed forward: logits only for the positions asked for, the
    log-softmax-gather and entropy on those ``[M, V]`` rows, scattered into ``[B, T]``."""
    with autocast_ctx(bf16, input_ids.device.type):
        logits, targets, where = hooks.HOOKS.forward.packed_logits(model, input_ids, attention_mask, wanted)
    z = _scaled(logits, temperature)
    lp = truncated_logprobs(z, targets, truncation)
    shape, n = input_ids.shape, input_ids.numel()
    logprobs = torch.zeros(n, dtype=torch.float32, device=lp.device).index_put((where,), lp).view(shape)
    entropy = None
    if with_entropy:
        if entropy_grad:
            ent = differentiable_entropy(z)
        else:
            with torch.no_grad():
                zd = z.detach()
                ent = torch.logsumexp(zd, -1) - (torch.softmax(zd, -1) * zd).sum(-1)
        entropy = torch.zeros(n, dtype=ent.dtype, device=lp.device).index_put((where,), ent).view(shape)
    return logprobs, entropy


def sequence_logprobs(model, rows: list[tuple[list[int], list[int]]], pad_id: int, bf16: bool = False):
    """One forward pass over ``rows`` of ``(ids, loss_mask)`` -> (summed logprobs over the loss mask [R],
    completion lengths [R]) on the model's device."""
    from rlvr.data.collate import TokenBatch

    b = TokenBatch.from_rows([r[0] for r in rows], [r[1] for r in rows], pad_id,
                             device=next(model.parameters()).device)
    lp, _ = token_logprobs(model, b.input_ids, b.attention_mask, 1.0, bf16=bf16, wanted=b.loss_mask)
    return (lp * b.loss_mask).sum(dim=-1), b.loss_mask.sum(dim=1)


@torch.no_grad()
def cached_sequence_logprobs(model, rows, pad_id: int, micro: int, bf16: bool = False,
                             micro_tokens: int | str | None = "auto") -> torch.Tensor:
    """Summed logprobs of every row under ``model`` (no grad), in length-sorted micro-batches of at most
    ``micro`` rows and ``micro_tokens`` (``model.micro_tokens``: see ``rlvr.data.collate.micro_token_budget``)
    -> [R]."""
    from rlvr.data.collate import micro_token_budget, plan_micro_batches, split_overhead

    out = torch.zeros(len(rows))
    plan = plan_micro_batches([len(r[0]) for r in rows], micro, split_overhead(model, hooks.packed_forward(model)),
                              micro_token_budget(model, micro_tokens))
    with hooks.reuse_weights():
        for idx in plan:
            lp, _ = sequence_logprobs(model, [rows[i] for i in idx], pad_id, bf16)
            out[idx] = lp.float().cpu()
    return out
