"""The output projection and the vocabulary-wide functions after it, chunked over tokens together.

A causal LM's logits are ``[tokens, V]``: 8 rows x 256 tokens x 151,936 ids is 1.2 GB in float32, before
the log-softmax's copies. Every training-time logprob in rlvr therefore runs the model's *body* only (its
final hidden states ``[M, hidden]``, at the M positions whose next token is asked for) and then
:func:`head_logprobs`: chunk by chunk of ``logit_chunk`` rows, ``logits = head(h[chunk])`` (the model's own
``lm_head`` module: tied embeddings, a bias or a LoRA-wrapped head included), upcast to float32, divided by
the temperature, then the log-softmax gathered at the target (of the top-k / top-p distribution when the
sampling truncated it), the entropy and whether the target is the argmax. With a gradient each chunk runs
under activation checkpointing: its logits are freed after the forward and recomputed in the backward, so
the memory of the step grows with the chunk (``logit_chunk x V``), never with ``tokens x V``; the values
and gradients are the unchunked computation's (``tests/unit/models/test_lm_head.py``). The cost is the head's
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


@dataclass
class HeadOut:
    """Per selected row: ``logprobs [M]`` (float32, differentiable), ``entropy [M]`` (None unless asked; with
    a gradient when asked so), ``hits [M]`` (bool: the target is the argmax; None unless asked)."""

    logprobs: Tensor
    entropy: Tensor | None = None
    hits: Tensor | None = None


def _rows(head, h: Tensor, targets: Tensor, temperature: float, truncation: Truncation, entropy: str | None,
          hits: bool):
    """The vocabulary functions of one chunk (see :func:`head_logprobs`); returns a tuple of tensors."""
    z = head(h).float()
    if temperature != 1.0:
        z = z / temperature
    out = [truncated_logprobs(z, targets, truncation)]
    if entropy == "grad":
        out.append(entropy_rows(z))
    elif entropy is not None:
        with torch.no_grad():
            out.append(entropy_rows(z))
    if hits:
        with torch.no_grad():
            out.append(z.gather(-1, targets[:, None]).squeeze(-1) >= z.max(-1).values)
    return tuple(out)


def head_logprobs(head, h: Tensor, targets: Tensor, temperature: float = 1.0, truncation: Truncation = NONE,
                  entropy: str | None = None, hits: bool = False, chunk: int | None = None,
                  vocab: int | None = None) -> HeadOut:
    """``log softmax(head(h) / T)[target]`` per row of ``h [M, hidden]`` (``targets [M]``), ``logit_chunk``
    rows at a time (module docstring). ``entropy``: None, ``"detached"`` or ``"grad"`` (the entropy of the
    full tempered distribution, differentiable: an entropy bonus); ``hits``: whether each target is the
    argmax. ``head`` is any module or function ``[n, hidden] -> [n, V]`` (``vocab``: V, for the automatic
    chunk; read from ``head.out_features`` or ``head.weight`` when omitted, else ``h``'s last size: an identity
    head over logits)."""
    if vocab is None:
        w = getattr(head, "weight", None)
        vocab = getattr(head, "out_features", None) or (w.shape[0] if isinstance(w, Tensor) else h.shape[-1])
    step = chunk_rows(vocab, chunk)
    M = h.shape[0]
    # one chunk (the tiny models' vocabularies): nothing to free between chunks, so no recomputation either
    grad = M > step and torch.is_grad_enabled() and (h.requires_grad or any(p.requires_grad for p in _params(head)))
    parts = []
    for s in range(0, max(M, 1), step):  # M = 0: one empty chunk, still attached to the graph
        args = (head, h[s:s + step], targets[s:s + step], temperature, truncation, entropy, hits)
        parts.append(checkpoint(_rows, *args, use_reentrant=False) if grad else _rows(*args))
    cols = [torch.cat(c) if len(c) > 1 else c[0] for c in zip(*parts)]
    ent = cols[1] if entropy is not None else None
    return HeadOut(cols[0], ent, cols[-1] if hits else None)


def _params(head):
    return head.parameters() if isinstance(head, torch.nn.Module) else ()
