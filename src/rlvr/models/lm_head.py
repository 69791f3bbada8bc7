"""The output projection and the vocabulary-wide functions after it, chunked over tokens together.

A causal LM's logits are ``[tokens, V]``: 8 rows x 256 tokens x 151,936 ids is 1.2 GB in float32, before
the log-softmax's copies. Every training-time logprob in rlvr therefore runs the model's *body* only (its
final hidden states ``[M, hidden]``, at the M positions whose next token is asked for) and then
:func:`head_logprobs`: chunk by chunk of ``logit_chunk`` rows, ``logits = head(h[chunk])`` (the model's own
``lm_head`` module: tied embeddings, a bias or a LoRA-wrapped head included), upcast to float32, divided by
the temperature, then the log-softmax gathered at the target (of the top-k / top-p distribution when the
sampling truncated it), the entropy and whether the target is the argmax. With a gradient each chunk's
logits are freed after the forward and recomputed in the backward (a plain ``nn.Linear`` head by
:class:`_LinearHead`, which accumulates the weight's gradient in one buffer; any other head under
``torch.utils.checkpoint``; a frozen head whose only differentiable output is the logprob keeps each chunk's slope
``d lp / d h`` instead and recomputes nothing), so
the memory of the step grows with the chunk (``logit_chunk x V``), never with ``tokens x V``; the values
and gradients are the unchunked computation's (``tests/unit/models/test_lm_head.py``). The cost (recomputing path) is the head's
matmul once more in the backward, paid only when there is more than one chunk (a micro-batch that fits in one
chunk, as any of the tiny models' does, keeps its logits for the backward as an unchunked forward would).

:func:`split_head` says where a model's body ends: a transformers causal LM (or a peft model over one)
whose logits are exactly ``lm_head(decoder(...).last_hidden_state)``. Models with a logit scale or soft
cap after the head (Gemma-2's ``final_logit_softcapping``, Cohere's ``logit_scale``, Granite's
``logits_scaling``), models with forward hooks on the causal LM module itself (they expect its call) and
modules that are not transformers' are forwarded whole (full logits, still chunked
after the head).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from rlvr.losses.entropy import entropy_rows
from rlvr.models.truncation import NONE, Truncation, truncated_logprobs

LOGIT_ELEMENTS = 1 << 25
"""The automatic chunk: as many tokens as make ``2^25`` logits (128 MB in float32) a chunk, at least
:data:`MIN_CHUNK`: 220 tokens at a 152k vocabulary, the whole micro-batch at the tiny models' few hundred ids
(where one chunk costs nothing over the unchunked path)."""
MIN_CHUNK = 16

_CHUNK: list[int | None] = [None]

POST_HEAD_FIELDS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")
"""Config fields of architectures whose logits are not the head's output (a soft cap or scale after it)."""


def set_logit_chunk(rows: int | None) -> None:
    """The process's chunk (``model.logit_chunk`` of the stage being run; None: automatic)."""
    if rows is not None and rows < 1:
        raise ValueError(f"logit_chunk must be >= 1 or None, got {rows}")
    _CHUNK[0] = rows


def chunk_rows(vocab: int, rows: int | None = None) -> int:
    """Tokens per chunk: ``rows``, else the process's setting, else ``max(MIN_CHUNK, LOGIT_ELEMENTS // vocab)``."""
    rows = rows if rows is not None else _CHUNK[0]
    return rows if rows is not None else max(MIN_CHUNK, LOGIT_ELEMENTS // max(vocab, 1))


def split_head(model):
    """``(decoder, head)`` of a causal LM whose logits are ``head(decoder(...).last_hidden_state)``, else None."""
    lm = model.get_base_model() if hasattr(model, "peft_config") and hasattr(model, "get_base_model") else model
    get_dec, get_head = getattr(lm, "get_decoder", None), getattr(lm, "get_output_embeddings", None)
    cfg = getattr(lm, "config", None)
    if get_dec is None or get_head is None or getattr(lm, "is_rlvr_native", False) or cfg is None:
        return None
    if any(getattr(cfg, f, None) not in (None, 1, 1.0) for f in POST_HEAD_FIELDS):
        return None
    if any(m._forward_hooks or m._forward_pre_hooks for m in {model, lm}):  # they expect the whole forward
        return None
    try:
        dec, head = get_dec(), get_head()
    except (AttributeError, NotImplementedError, ValueError):
        return None
    if dec is None or dec is lm or head is None:
        return None
    return dec, head


def final_hidden_states(model, **inputs) -> Tensor:
    """The last layer's (final-norm) hidden states ``[B, T, hidden]`` of ``model(**inputs)``: the decoder alone where
    :func:`split_head` splits the model (no logits computed), else the whole forward's ``hidden_states[-1]``."""
    split = split_head(model)
    if split is not None:
        return split[0](**inputs, use_cache=False).last_hidden_state
    return model(**inputs, output_hidden_states=True, use_cache=False).hidden_states[-1]


@dataclass
class HeadOut:
    """Per selected row: ``logprobs [M]`` (float32, differentiable), ``entropy [M]`` (None unless asked; with
    a gradient when asked so), ``hits [M]`` (bool: the target is the argmax; None unless asked)."""

    logprobs: Tensor
    entropy: Tensor | None = None
    hits: Tensor | None = None


def _vocab(z: Tensor, targets: Tensor, temperature: float, truncation: Truncation, entropy: str | None,
           hits: bool) -> tuple:
    """The vocabulary functions of one chunk's logits ``z [n, V]`` (any float dtype): ``(logprobs, entropy or
    None, hits or None)`` of the tempered float32 logits."""
    z = z.float()
    if temperature != 1.0:
        z = z / temperature
    lp = truncated_logprobs(z, targets, truncation)
    ent = top = None
    if entropy == "grad":
        ent = entropy_rows(z)
    elif entropy is not None:
        with torch.no_grad():
            ent = entropy_rows(z)
    if hits:
        with torch.no_grad():
            top = z.gather(-1, targets[:, None]).squeeze(-1) >= z.max(-1).values
    return lp, ent, top


def _rows(head, h: Tensor, targets: Tensor, *spec):
    """:func:`_vocab` of ``head(h)`` (one chunk of the checkpointed path), the Nones left out."""
    return tuple(t for t in _vocab(head(h), targets, *spec) if t is not None)


class _LinearHead(torch.autograd.Function):
    """:func:`_vocab` of ``linear(h, weight, bias)`` chunk by chunk (``spec[0]`` rows), for a plain Linear head.

    Forward: each chunk's logits under no grad, freed at once. Backward: each chunk's logits recomputed, the
    gradient of the vocabulary functions w.r.t. them by autograd (``gz [n, V]``), then ``grad_h[chunk] = gz W``
    and ``grad_W += gz^T h[chunk]`` accumulated in place in one buffer (the checkpointed path keeps one more
    ``[V, hidden]`` temporary per chunk before the engine adds it). The backward recomputes the logits under the
    forward's autocast state."""

    @staticmethod
    def forward(ctx, h, weight, bias, targets, spec):
        step, vocab_spec = spec[0], spec[1:]
        frozen = _frozen_head(ctx.needs_input_grad, vocab_spec[2])
        parts, slopes = [], []
        for s in range(0, h.shape[0], step):
            z = F.linear(h[s:s + step], weight, bias)
            if not frozen:
                parts.append(_vocab(z, targets[s:s + step], *vocab_spec))
                continue
            z = z.detach().requires_grad_(True)
            with torch.enable_grad():
                out = _vocab(z, targets[s:s + step], *vocab_spec)
                (gz,) = torch.autograd.grad(out[0].sum(), [z])  # row i's lp depends on row i's logits only
            slopes.append(gz @ weight.to(gz.dtype))  # d lp_i / d h_i, [n, hidden]
            parts.append(tuple(None if t is None else t.detach() for t in out))
            del z, gz
        lp, ent, top = (torch.cat(c) if c[0] is not None else None for c in zip(*parts))
        if frozen:  # the backward is g_lp * slope: no logits recomputed, h and W not kept
            ctx.save_for_backward(torch.cat(slopes))
        else:
            ctx.save_for_backward(h, weight, bias, targets)
        ctx.frozen = frozen
        ctx.spec = spec
        dev = h.device.type
        ctx.autocast = (dev, torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
        ent_out = ent if ent is not None else lp.new_zeros(0)
        top_out = top if top is not None else torch.zeros(0, dtype=torch.bool, device=h.device)
        ctx.mark_non_differentiable(top_out)
        if vocab_spec[2] != "grad":
            ctx.mark_non_differentiable(ent_out)
        return lp, ent_out, top_out

    @staticmethod
    def backward(ctx, g_lp, g_ent, _g_top):
        if ctx.frozen:
            (slope,) = ctx.saved_tensors
            return (g_lp[:, None] * slope).to(slope.dtype), None, None, None, None
        h, weight, bias, targets = ctx.saved_tensors
        step, vocab_spec = ctx.spec[0], ctx.spec[1:]
        want_h, want_w, want_b = ctx.needs_input_grad[:3]
        grad_h = torch.zeros_like(h) if want_h else None
        grad_w = torch.zeros_like(weight) if want_w else None
        grad_b = torch.zeros_like(bias) if want_b else None
        with_ent = vocab_spec[2] == "grad" and g_ent is not None and g_ent.numel() > 0
        dev, on, cast = ctx.autocast
        for s in range(0, h.shape[0], step):
            hc = h[s:s + step]
            with torch.no_grad(), torch.autocast(dev, dtype=cast, enabled=on):  # the forward's precision
                z = F.linear(hc, weight, bias)
            z.requires_grad_(True)
            with torch.enable_grad():
                lp, ent, _ = _vocab(z, targets[s:s + step], *vocab_spec)
                outs, grads = [lp], [g_lp[s:s + step]]
                if with_ent:
                    outs.append(ent)
                    grads.append(g_ent[s:s + step])
                (gz,) = torch.autograd.grad(outs, [z], grads)
            if want_h:
                grad_h[s:s + step] = (gz @ weight.to(gz.dtype)).to(h.dtype)
            if want_w:
                grad_w.addmm_(gz.t().to(weight.dtype), hc.to(weight.dtype))
            if want_b:
                grad_b += gz.sum(0).to(bias.dtype)
            del z, gz
        return grad_h, grad_w, grad_b, None, None


def _frozen_head(needs_grad: tuple, entropy: str | None) -> bool:
    """Whether only ``h`` needs a gradient and only the logprobs carry one (a head frozen, as under LoRA, with
    no entropy bonus): then :class:`_LinearHead` computes ``d lp / d h`` with each chunk's forward (one
    ``[n, V] x [V, hidden]`` product while the logits exist) and its backward is a product by ``g_lp``, instead
    of recomputing the logits and their gradient (two such products)."""
    want_h, want_w, want_b = needs_grad[:3]
    return want_h and not want_w and not want_b and entropy != "grad"


def head_logprobs(head, h: Tensor, targets: Tensor, temperature: float = 1.0, truncation: Truncation = NONE,
                  entropy: str | None = None, hits: bool = False, chunk: int | None = None,
                  vocab: int | None = None) -> HeadOut:
    """``log softmax(head(h) / T)[target]`` per row of ``h [M, hidden]`` (``targets [M]``), ``logit_chunk``
    rows at a time (module docstring). ``entropy``: None, ``"detached"`` or ``"grad"`` (the entropy of the
    full tempered distribution, differentiable: an entropy bonus); ``hits``: whether each target is the
    argmax. ``head`` is any module or function ``[n, hidden] -> [n, V]`` (``vocab``: V, for the automatic
    chunk; read from ``head.out_features`` or ``head.weight`` when omitted, else ``h``'s last size: an identity
    head over logits). A plain ``nn.Linear`` head takes :class:`_LinearHead`; any other module is
    checkpointed chunk by chunk (``torch.utils.checkpoint``)."""
    if vocab is None:
        w = getattr(head, "weight", None)
        vocab = getattr(head, "out_features", None) or (w.shape[0] if isinstance(w, Tensor) else h.shape[-1])
    step = chunk_rows(vocab, chunk)
    M = h.shape[0]
    spec = (temperature, truncation, entropy, hits)
    # one chunk (the tiny models' vocabularies): nothing to free between chunks, so no recomputation either
    grad = M > step and torch.is_grad_enabled() and (h.requires_grad or any(p.requires_grad for p in _params(head)))
    if not grad:
        parts = [_vocab(head(h[s:s + step]), targets[s:s + step], *spec) for s in range(0, max(M, 1), step)]
        lp, ent, top = (torch.cat(c) if len(c) > 1 and c[0] is not None else c[0] for c in zip(*parts))
        return HeadOut(lp, ent, top)
    if type(head) is torch.nn.Linear:
        lp, ent, top = _LinearHead.apply(h, head.weight, head.bias, targets, (step, *spec))
        return HeadOut(lp, ent if entropy is not None else None, top if hits else None)
    parts = [checkpoint(_rows, head, h[s:s + step], targets[s:s + step], *spec, use_reentrant=False)
             for s in range(0, M, step)]
    cols = [torch.cat(c) for c in zip(*parts)]
    return HeadOut(cols[0], cols[1] if entropy is not None else None, cols[-1] if hits else None)


def _params(head):
    return head.parameters() if isinstance(head, torch.nn.Module) else ()
