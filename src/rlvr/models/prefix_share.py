"""A group's prompt run through the decoder once per pass, not once per row (the HF path).

GRPO samples G completions of each prompt. The reference pass, a recomputed-old-logprob pass and the update
forward every row as prompt + completion: on the HF path the prompt's layers are computed G times, once per
micro-batch where a micro-batch holds one row (a real-shape model on a small device). A :class:`PrefixCache`
given to :func:`rlvr.models.logprobs.token_logprobs` instead runs the decoder over the prefix the micro-batch's
rows share (their common tokens before the first logprob asked for, less the last, whose hidden state
predicts the first completion token) once, keeps its keys and values, and runs each row's continuation
against them; the next micro-batch that continues the same prefix reuses them. The keys and values are the
ones the whole-row forward computes, so the logprobs are the same function (equal up to float summation
order), and the reference pass and the first update, which cut the rows alike, get the same bits.

Under autograd the cached keys and values enter each continuation as leaves: every micro-batch's backward adds
its rows' gradient into them, and :meth:`PrefixCache.flush` — when a micro-batch asks for another prefix, and
when the pass ends (:func:`shared_prefixes`) — backpropagates their sum through the prefix's forward once.
The gradient is the sum of the per-row forwards' (exact gradient accumulation still: a row's loss is divided
by its mini-batch's denominators wherever its prefix is computed).

The packed forward of the accelerations shares a group's prompt within a micro-batch its own way
(``rlvr.hooks``); this is the plain PyTorch / transformers path's. Decoders whose attention is not full causal
attention over one cache (sliding windows, linear attention), models whose forward fills no HF KV cache (checked
on each forward: the cache must hold the prefix, then the prefix and the continuation) and, under autograd,
gradient checkpointing (a recomputed layer would append to the cache twice) are left to the whole-row forward.
"""

from __future__ import annotations

import contextlib

import torch

from rlvr.models.kv_cache import cache_kwarg

MIN_SHARED = 4
"""A shared prefix shorter than this many tokens is not worth a separate decoder call."""

ENABLED = True
"""False: every pass forwards whole rows (``bench/micro_tokens_ab.py --share-prompts off`` measures the saving)."""


class PrefixCache:
    """The keys and values of the last prefix a pass computed (one at a time: a pass's micro-batches keep a
    group's rows together), with their pending gradient under autograd.

    The contract of a pass under autograd (``trainers.common.accumulate``'s loop): one forward through the cache
    per micro-batch, and that micro-batch's backward before the next forward — a prefix is backpropagated when
    the next micro-batch asks for another one, so its last reader's gradient must already be in its leaves."""

    def __init__(self):
        self._key = None
        self._kv: list[tuple[torch.Tensor, torch.Tensor]] = []  # as the prefix forward computed them
        self._leaves: list[tuple[torch.Tensor, torch.Tensor]] = []  # what the continuations read
        self.prefix_tokens = 0
        """Tokens run through the decoder as prefixes (each shared prefix once per pass)."""
        self.shared_tokens = 0
        """Row tokens read from a cached prefix instead of computed with their row (``shared_tokens -
        prefix_tokens`` is what the cache saved)."""

    def continuation(self, dec, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                     wanted: torch.Tensor | None):
        """``(hidden [B, T - S, hidden], S)``: the decoder's last hidden states from position ``S`` on, the
        first ``S`` positions (the rows' shared prefix) computed once and cached; None where nothing is shared
        (the caller then runs the whole rows)."""
        S = shared_length(input_ids, attention_mask, wanted)
        if S < MIN_SHARED or not supports(dec) or (torch.is_grad_enabled() and _checkpointed(dec)):
            return None
        kw = cache_kwarg(dec)
        key = (id(dec), torch.is_grad_enabled(), tuple(input_ids[0, :S].tolist()))
        if key != self._key:
            self.flush()
            if not self._compute(dec, input_ids[:1, :S], position_ids[:1, :S], kw):
                return None
            self._key = key
            self.prefix_tokens += S
        B, T = input_ids.shape
        cache = _empty_cache()
        for i, (k, v) in enumerate(self._leaves):
            cache.update(k.expand(B, -1, -1, -1), v.expand(B, -1, -1, -1), i)
        out = dec(input_ids=input_ids[:, S:], attention_mask=attention_mask, position_ids=position_ids[:, S:],
                  use_cache=True, **{kw: cache})
        if cache.get_seq_length() != T:  # the decoder did not attend through the cache: its states are wrong
            return None
        self.shared_tokens += S * B
        return out.last_hidden_state, S

    def _compute(self, dec, ids: torch.Tensor, pos: torch.Tensor, kw: str) -> bool:
        """Run the prefix and keep its keys and values; False where the decoder filled no cache of that length."""
        cache = _empty_cache()
        dec(input_ids=ids, position_ids=pos, use_cache=True, **{kw: cache})
        kv = _layers(cache)
        if not kv or any(k.shape[-2] != ids.shape[1] for k, _ in kv):
            return False
        self._kv = kv
        self._leaves = [(_leaf(k), _leaf(v)) for k, v in self._kv]
        return True

    def flush(self) -> None:
        """Backpropagate the gradient the continuations left on the cached prefix through its forward, and
        forget it."""
        outs, grads = [], []
        for (k, v), (lk, lv) in zip(self._kv, self._leaves):
            for t, leaf in ((k, lk), (v, lv)):
                if leaf.requires_grad and leaf.grad is not None:
                    outs.append(t)
                    grads.append(leaf.grad)
        if outs:
            torch.autograd.backward(outs, grads)
        self._key, self._kv, self._leaves = None, [], []


@contextlib.contextmanager
def shared_prefixes():
    """A :class:`PrefixCache` for one pass (None where :data:`ENABLED` is off); its pending gradient is
    backpropagated when the pass ends normally (on an exception it is dropped with the pass's)."""
    if not ENABLED:
        yield None
        return
    cache = PrefixCache()
    yield cache
    cache.flush()


def shared_length(input_ids: torch.Tensor, attention_mask: torch.Tensor, wanted: torch.Tensor | None) -> int:
    """The prefix every row of the micro-batch shares and that no logprob is asked inside: the common real
    tokens of all rows, up to one before the first ``wanted`` position of any row (0 where a row asks for
    none, or without ``wanted``)."""
    if wanted is None:
        return 0
    has = wanted.bool().any(dim=1)
    if not bool(has.all()):
        return 0
    first = int(wanted.bool().int().argmax(dim=1).min())
    if first < 2:
        return 0
    same = (input_ids[:, :first - 1] == input_ids[:1, :first - 1]).all(dim=0) \
        & attention_mask[:, :first - 1].bool().all(dim=0)
    differ = (~same).nonzero()
    return int(differ[0]) if len(differ) else first - 1


def supports(dec) -> bool:
    """Whether ``dec`` (an HF decoder) attends with full causal attention over one key/value cache, so that a
    continuation over a cached prefix computes what the whole rows do."""
    cfg = getattr(dec, "config", None)
    if cfg is None or getattr(cfg, "is_encoder_decoder", False):
        return False
    types = getattr(cfg, "layer_types", None)
    if types is not None:
        return all(t == "full_attention" for t in types)
    return getattr(cfg, "sliding_window", None) is None or getattr(cfg, "use_sliding_window", None) is False


def _checkpointed(dec) -> bool:
    """Whether ``dec`` recomputes its layers in the backward (gradient checkpointing): a recomputed layer would
    append its keys to the cache a second time."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in dec.modules())


def _leaf(t: torch.Tensor) -> torch.Tensor:
    """What a continuation reads of a prefix tensor: detached, a gradient leaf where the prefix's forward
    carries a gradient (its pending gradient then collects there)."""
    return t.detach().requires_grad_() if t.requires_grad else t.detach()


def _empty_cache():
    from transformers import DynamicCache

    return DynamicCache()


def _layers(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's ``(keys, values)`` ``[1, heads, S, head_dim]`` of a filled DynamicCache."""
    if hasattr(cache, "layers"):
        return [(la.keys, la.values) for la in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))
