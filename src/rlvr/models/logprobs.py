"""Per-token log-probabilities (and entropies) of a sequence under a causal LM.

Convention (glossary): for ``input_ids [B, T]`` the returned ``logprobs [B, T]`` hold
``log π(ids[t] | ids[<t])`` at position ``t`` and 0 at ``t = 0``; ``loss_mask`` selects the
completion tokens. Logits are upcast to float32, then divided by the sampling temperature, so that
training-time logprobs match the sampling policy's (the engine samples from ``log_softmax(float(z) / T)``).

The model's body runs once (the HF decoder, or the ``forward`` hook's packed forward); the output projection
runs with the log-softmax, the entropy and the argmax in chunks of tokens (``rlvr.models.lm_head``), so the
``[tokens, V]`` logits of a micro-batch never exist at once, forward or backward. On the HF path a pass's
``PrefixCache`` runs the prefix a micro-batch's rows share (a GRPO group's prompt) once per pass
(``rlvr.models.prefix_share``). Every consumer goes
through here: the RL and PPO updates and their old / reference passes (:func:`token_logprobs`), the
preference step and its reference cache (:func:`sequence_logprobs`), SFT and its held-out loss
(:func:`token_nll`).
"""

from __future__ import annotations

import contextlib

import torch

from rlvr import hooks
from rlvr.models.lm_head import HeadOut, head_logprobs, split_head
from rlvr.models.prefix_share import PrefixCache
from rlvr.models.truncation import NONE, Truncation


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that ignore left padding: 0 at each sequence's first real token."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)


def _scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits / T`` computed in float32: upcast first (bf16 logits divided in bf16 lose ~3 digits)."""
    lg = logits.float()
    return lg if temperature == 1.0 else lg / temperature


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
                   wanted: torch.Tensor | None = None, packed: bool | None = None, truncation: Truncation = NONE,
                   prefix: PrefixCache | None = None):
    """``(logprobs [B, T], entropy [B, T] or None)`` of each token given its prefix.

    ``truncation`` (top-k / top-p of the sampling): the logprobs are those of the renormalised truncated
    distribution the sampler drew from (``rlvr.models.truncation``); the entropy stays the full tempered
    distribution's.

    ``entropy[:, t]`` is the entropy of the distribution token ``t`` was drawn from (0 at ``t = 0``). It is
    detached unless ``entropy_grad`` (an entropy bonus in the loss): then it carries the gradient.

    The values at a real token with a real predecessor are the HF forward's, and 0 elsewhere (padding, each
    row's first token, and, given ``wanted [B, T]``, every position outside it: the logits there are not
    computed). The logits are never materialised for the whole batch: the model's body gives the hidden
    states, and the output projection runs with the log-softmax in chunks of tokens (``rlvr.models.lm_head``).
    Models the ``forward`` hook supports (``rlvr.hooks``; the accelerations' padding-free packed forward) take
    it for the body (``packed``: None = when supported). On the HF path, ``prefix`` (a pass's
    :class:`rlvr.models.prefix_share.PrefixCache`) runs the prefix the rows share (a group's prompt) once and
    each row's continuation against its cached keys and values.
    """
    out, where = selected_logprobs(model, input_ids, attention_mask, temperature,
                                   "grad" if entropy_grad else "detached" if with_entropy else None,
                                   bf16=bf16, wanted=wanted, packed=packed, truncation=truncation, prefix=prefix)
    n, shape = input_ids.numel(), input_ids.shape
    logprobs = torch.zeros(n, dtype=torch.float32, device=input_ids.device).index_put((where,), out.logprobs)
    entropy = None
    if with_entropy:
        entropy = torch.zeros(n, dtype=out.entropy.dtype, device=input_ids.device).index_put((where,), out.entropy)
        entropy = entropy.view(shape)
    return logprobs.view(shape), entropy


def selected_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                      temperature: float = 1.0, entropy: str | None = None, hits: bool = False, bf16: bool = False,
                      wanted: torch.Tensor | None = None, packed: bool | None = None, truncation: Truncation = NONE,
                      position_ids: torch.Tensor | None = None,
                      prefix: PrefixCache | None = None) -> tuple[HeadOut, torch.Tensor]:
    """``(HeadOut, where [M])``: :func:`rlvr.models.lm_head.head_logprobs` of the M tokens that have a real
    predecessor (and are ``wanted``), ``where`` their flat index in ``[B*T]``. ``attention_mask`` None: every
    token is real, ``position_ids`` as given (SFT's packed rows; the HF forward then)."""
    if temperature <= 0:
        raise ValueError(f"token_logprobs: temperature must be > 0, got {temperature}")
    if packed is None:
        packed = attention_mask is not None and hooks.packed_forward(model)
    with autocast_ctx(bf16, input_ids.device.type):
        if packed:
            h, targets, where = hooks.HOOKS.forward.packed_states(model, input_ids, attention_mask, wanted)
            head = model.lm_head
        else:
            h, targets, where, head = _body_states(model, input_ids, attention_mask, wanted, position_ids, prefix)
        out = head_logprobs(head, h, targets, temperature, truncation, entropy, hits)
    M = where.numel()
    if out.logprobs.shape[0] != M:  # rows the packed forward rounded up (their outputs are not read)
        out = HeadOut(out.logprobs[:M], None if out.entropy is None else out.entropy[:M],
                      None if out.hits is None else out.hits[:M])
    return out, where


def token_nll(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, loss_mask: torch.Tensor,
              bf16: bool = False, position_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(nll [N], hits [N])`` of the N tokens where ``loss_mask`` is 1 (and the predecessor real): ``-log π(token
    | prefix)`` at temperature 1 (differentiable) and whether the token is the argmax (the SFT loss's inputs,
    ``rlvr.losses.sft.sft_loss_from_nll``), the output projection chunked with the log-softmax."""
    out, _ = selected_logprobs(model, input_ids, attention_mask, hits=True, bf16=bf16, wanted=loss_mask,
                               position_ids=position_ids)
    return -out.logprobs, out.hits


def _body_states(model, input_ids, attention_mask, wanted, position_ids, prefix=None):
    """The HF path of :func:`selected_logprobs`: ``(h [M, hidden], targets [M], where [M], head)`` from the
    decoder's last hidden states (:func:`rlvr.models.lm_head.split_head`), or, for a model that cannot be
    split, its full logits' rows with an identity head. Given ``prefix`` (and default positions), the rows'
    shared prefix comes from the cache and the decoder runs their continuations only."""
    att = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
    if position_ids is not None:
        prefix = None  # explicit positions: packed SFT rows, not a group's continuations
    else:
        position_ids = position_ids_from_mask(att)
    ok = att[:, 1:].bool() & att[:, :-1].bool()
    if wanted is not None:
        ok &= wanted[:, 1:].bool()
    B, T = input_ids.shape
    src = (ok.nonzero() * torch.tensor([T, 1], device=ok.device)).sum(-1)  # flat index of each predecessor
    where = src + 1
    split = split_head(model)
    kw = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids, "use_cache": False}
    cont = None
    if split is not None:
        dec, head = split
        if prefix is not None:
            cont = prefix.continuation(dec, input_ids, att, position_ids, wanted)
        hs = cont[0] if cont is not None else dec(**kw).last_hidden_state
    else:
        hs, head = model(**kw).logits, _identity
    if cont is not None:  # hidden states from position S on: the predecessors' indices in [B, T - S]
        S = cont[1]
        src = src - (src // T + 1) * S
        T = T - S
    rows = hs.reshape(B * T, hs.shape[-1]).index_select(0, src)
    return rows, input_ids.reshape(-1).index_select(0, where), where, head


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


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
