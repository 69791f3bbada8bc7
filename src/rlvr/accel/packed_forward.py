"""A padding-free, differentiable training forward for Llama-architecture causal LMs (Llama, Qwen2, Mistral).

The training forward of a batch of ragged rows spends most of its time in the projections and the MLP.
HF's forward runs them on the padded ``[B, T]`` grid; here they run on the packed real tokens only:

    h = embed(ids[real])                                        # [N, hidden], N = number of real tokens
    for each layer:  x = RMSNorm(h);  q, k, v = RoPE(W_q x), RoPE(W_k x), W_v x      (on [N, ·])
                     o = causal attention of each row on its own tokens   (a padded view, see below)
                     h = h + W_o o;  x = RMSNorm(h);  h = h + W_down (SiLU(W_gate x) ⊙ W_up x)
    states = RMSNorm(h[wanted])                                 # only where a logprob is asked for
    (the core applies W_lm to them chunk by chunk with the log-softmax: rlvr.models.lm_head)

Attention runs on a view where each row's real tokens sit at ``0 .. len-1`` (right-aligned padding after
them), so ``scaled_dot_product_attention(is_causal=True)`` is exact for every real query: its padding keys
come after it. Left-padded, right-padded or holed ``attention_mask`` rows are all the same here: the real
tokens in order, positions ``0 .. len-1`` (as ``position_ids_from_mask``). The ops are HF's, op for op
(RMSNorm in float32 cast back before the weight, RoPE from the model's own ``rotary_emb`` so scaled RoPE
types are honoured, ``q·k / sqrt(D)``); autograd runs through the model's own Parameters, so the
gradient is the HF forward's (tests: ``tests/unit/accel/test_packed_forward.py``).

Generic over the batch: the RL update, the preference step and an SFT step can all use it through
``rlvr.models.logprobs.token_logprobs``. ``unsupported_reason(model)`` says why a model must take the HF
forward instead (LoRA/peft, another architecture, hooks, dropout, sliding windows, dynamic RoPE).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlvr.accel.packed_attention import causal_attention, packed_causal_attention, scatter_to_view, swiglu
from rlvr.accel.packed_fused import norm_linear, swiglu_linear
from rlvr.accel.packed_fused import rms as _rms
from rlvr.accel.packed_rope import rope_heads
from rlvr.models.arch import llama_family_reason


def unsupported_reason(model) -> str | None:
    """None when ``model`` can take the packed training forward, else why not (then: the HF forward)."""
    if hasattr(model, "peft_config"):
        return "a peft/LoRA-wrapped model"
    why = llama_family_reason(model)
    if why:
        return why
    name, cfg, inner = type(model).__name__, model.config, model.model
    if model.training and any(float(getattr(la.self_attn, "attention_dropout", 0.0) or 0.0) > 0 for la in inner.layers):
        return "attention dropout is on"  # (the rate HF's attention reads at forward time; rlvr's own module has none)
    if getattr(cfg, "sliding_window", None) is not None and (
            name == "MistralForCausalLM" or "sliding_attention" in (getattr(cfg, "layer_types", None) or [])):
        return "a sliding attention window"
    if type(inner.embed_tokens) is not torch.nn.Embedding or type(model.lm_head) is not torch.nn.Linear:
        return "embed_tokens / lm_head are not plain Embedding / Linear modules"
    linear = torch.nn.Linear
    for i, layer in enumerate(inner.layers):
        att, mlp = layer.self_attn, layer.mlp
        if not all(type(p) is linear for p in (att.q_proj, att.k_proj, att.v_proj, att.o_proj, mlp.gate_proj,
                                                mlp.up_proj, mlp.down_proj)):
            return f"layer {i} has non-plain projection modules (adapters, quantisation, ...)"
    for m in model.modules():
        if m._forward_hooks or m._forward_pre_hooks or hasattr(m, "_hf_hook"):
            return "the model has forward hooks"
        if getattr(m, "gradient_checkpointing", False) is True:
            return "gradient checkpointing is on (the HF forward recomputes activations)"
    return None


def supports(model) -> bool:
    """``unsupported_reason(model) is None`` (checked at every call, ~50 µs for a tiny model: a hook or an
    adapter added later is seen)."""
    return unsupported_reason(model) is None


class Packing:
    """Where the real tokens of a ``[B, T]`` batch go: the packed tokens the layers run on, and the
    attention view ``[B, L]`` (each row's real tokens at ``0 .. len-1``, L = the longest row).

    ``share``: the tokens of a prefix that several rows start with (a GRPO group's prompt; a DPO pair's
    prompt and the common start of its chosen and rejected answers) are packed once: their hidden states
    are identical in each such row (causal attention, same tokens, same positions). Every row's attention
    view reads them, each row's logprobs read their logits, and their gradient is the sum over the rows
    (the backward of an index_select). Fields: ``ids [N]``, ``pos [N]`` of the packed tokens; per real slot
    (row-major, S of them) ``slot_flat [S]`` its index in ``B*T``, ``slot_view [S]`` in ``B*L``,
    ``slot_tok [S]`` its packed token (None: the identity, nothing shared); ``owner_view [N]`` the view
    slot each packed token's attention output is read from.

    ``pad_to``: N is rounded up (:func:`rounded_rows`) with dummy tokens whose outputs nothing reads (their
    gradient is 0). Under bf16 autocast on CPU every distinct GEMM row count costs oneDNN a JIT-compiled
    primitive (~0.6 MB, cached for the process's life): :func:`packed_logits` rounds N (and the logit rows)
    up (:data:`AUTOCAST_ROWS`) there, so ragged batches reuse a few shapes.
    """

    def __init__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, share: bool = True, pad_to: int = 0):
        real = attention_mask.bool()
        B, T = real.shape
        self.B, self.T = B, T
        self.slot_flat = real.reshape(-1).nonzero().squeeze(-1)
        rank = (real.long().cumsum(-1) - 1).reshape(-1)[self.slot_flat]
        lens = real.sum(-1)
        self.L = L = int(lens.max()) if B else 0
        self.slot_view = self.slot_flat // T * L + rank
        self.slot_rank = rank
        slot_ids = input_ids.reshape(-1)[self.slot_flat]
        self.slot_ids = slot_ids
        self.slot_tok = _share(slot_ids, lens) if share else None
        if self.slot_tok is None:
            self.ids, self.pos, self.owner_view = slot_ids, rank, self.slot_view
            self.N = slot_ids.numel()
        else:
            n = int(self.slot_tok.max()) + 1
            self.N = n
            self.ids = slot_ids.new_zeros(n).scatter_(0, self.slot_tok, slot_ids)
            self.pos = rank.new_zeros(n).scatter_(0, self.slot_tok, rank)
            self.owner_view = self.slot_view.new_zeros(n).scatter_(0, self.slot_tok.flip(0), self.slot_view.flip(0))
        extra = rounded_rows(self.N, pad_to) - self.N
        if extra:  # dummy packed tokens (id and position 0) that no view slot and no logit reads
            if self.slot_tok is None:
                self.slot_tok = torch.arange(self.N, device=slot_ids.device)
            self.ids = torch.cat([self.ids, self.ids.new_zeros(extra)])
            self.pos = torch.cat([self.pos, self.pos.new_zeros(extra)])
            self.owner_view = torch.cat([self.owner_view, self.owner_view.new_zeros(extra)])
            self.N += extra
        self.identity = bool(self.slot_tok is None and self.N == B * L and L == T)  # no padding at all
        self._view_tok = None

    @property
    def view_tok(self) -> torch.Tensor:
        """``[B*L]``: the packed token at each position of the attention view; padding positions: token 0."""
        if self._view_tok is None:
            tok = self.slot_tok if self.slot_tok is not None else \
                torch.arange(self.slot_view.numel(), device=self.slot_view.device)
            self._view_tok = tok.new_zeros(self.B * self.L).index_copy_(0, self.slot_view, tok)
        return self._view_tok


def _share(slot_ids: torch.Tensor, lens: torch.Tensor) -> torch.Tensor | None:
    """Packed token of each real slot, one per distinct prefix (the nodes of a trie over the rows: a slot's
    token is the node of its row's tokens up to and including it); None when no two rows share a first
    token. Built from the rows in lexicographic order, where each row's longest common prefix with any
    earlier row is the one with the row just before it."""
    flat, lens_l = slot_ids.tolist(), lens.tolist()
    starts = [0]
    for ln in lens_l[:-1]:
        starts.append(starts[-1] + ln)
    rows = [flat[s:s + ln] for s, ln in zip(starts, lens_l)]
    nodes: list[list[int] | None] = [None] * len(rows)
    n, prev = 0, None
    for b in sorted(range(len(rows)), key=rows.__getitem__):
        row = rows[b]
        common = 0
        if prev is not None:
            other, m = rows[prev], min(len(row), len(rows[prev]))
            while common < m and row[common] == other[common]:
                common += 1
        nodes[b] = (nodes[prev][:common] if common else []) + list(range(n, n + len(row) - common))
        n += len(row) - common
        prev = b
    if n == len(flat):
        return None
    return torch.tensor([t for r in nodes for t in r], dtype=torch.long, device=slot_ids.device)


def packed_hidden(model, pk: Packing) -> torch.Tensor:
    """The final-norm hidden states of the packed tokens ``[N, hidden]`` (differentiable).

    Q, K and V come from one matmul with the three weights concatenated (as are the gate and up
    projections): the concatenation is part of the graph, so each Parameter gets its own slice of the
    gradient; RoPE rotates q and k together; attention is :func:`_attention` on the padded view."""
    inner = model.model
    h = F.embedding(pk.ids, inner.embed_tokens.weight)
    cos, sin = inner.rotary_emb(h, pk.pos[None])
    cos, sin = cos[0][:, None, :], sin[0][:, None, :]  # [N, 1, D]
    cis = None
    N = h.shape[0]
    for layer in inner.layers:
        att, mlp = layer.self_attn, layer.mlp
        D = att.head_dim
        Hq, Hkv = att.q_proj.out_features // D, att.k_proj.out_features // D
        ln = layer.input_layernorm
        w = (att.q_proj.weight, att.k_proj.weight, att.v_proj.weight)
        b = _cat_bias(att.q_proj, att.k_proj, att.v_proj)
        if COMPLEX_ROPE and h.dtype in (torch.float32, torch.float64) and not torch.is_autocast_enabled(h.device.type):
            # RoPE as one complex multiply: q/k rows permuted per head to (j, j + D/2) pairs (scores q·k
            # do not change when q and k are permuted alike), rotated in place in the matmul's output
            perm = _pair_permutation(Hq + Hkv, Hkv, D, w[0].device)
            b = None if b is None else b.index_select(0, perm)
            heads = _norm_proj(h, ln, w, b, perm).view(N, Hq + 2 * Hkv, D)
            if cis is None:
                cis = torch.complex(cos[..., :D // 2], sin[..., :D // 2])  # [N, 1, D/2]
            qk = torch.view_as_complex(heads[:, :Hq + Hkv].unflatten(-1, (D // 2, 2)))
            qk.mul_(cis)
        else:
            # the view in autocast's dtype (as its matmuls cast it)
            cast = torch.get_autocast_dtype(h.device.type) if torch.is_autocast_enabled(h.device.type) else None
            heads = rope_heads(_norm_proj(h, ln, w, b), cos, sin, Hq + 2 * Hkv, Hq + Hkv, D, cast)
        if FUSED and ATTENTION == "recompute" and Hq == Hkv and not pk.identity:  # saves the packed heads, not the view
            o = packed_causal_attention(heads, pk.view_tok, pk.owner_view, pk.B, pk.L, att.scaling)  # [N, Hq * D]
        else:
            o = _attention(_to_view(heads.transpose(0, 1), pk), pk, Hq, Hkv, att.scaling)  # [Hq, N, D]
            o = o.transpose(0, 1).reshape(N, Hq * D)
        h = h + F.linear(o, att.o_proj.weight, att.o_proj.bias)
        ln = layer.post_attention_layernorm
        gu = _norm_proj(h, ln, (mlp.gate_proj.weight, mlp.up_proj.weight), _cat_bias(mlp.gate_proj, mlp.up_proj))
        h = h + (swiglu_linear(gu, mlp.down_proj.weight, mlp.down_proj.bias) if FUSED
                 else F.linear(swiglu(gu), mlp.down_proj.weight, mlp.down_proj.bias))
    return _rms(h, inner.norm.weight, inner.norm.variance_epsilon)


def _norm_proj(h: torch.Tensor, ln, w: tuple[torch.Tensor, ...], b: torch.Tensor | None,
               perm: torch.Tensor | None = None) -> torch.Tensor:
    """``linear(RMSNorm(h), cat(w)[perm], b)`` (fused: saves only ``h`` and builds the stacked weight once a
    step, see :data:`FUSED` and :func:`rlvr.accel.packed_fused.reuse_weights`)."""
    if FUSED:
        return norm_linear(h, ln.weight, ln.variance_epsilon, w, b, perm)
    W = torch.cat(w)
    return F.linear(_rms(h, ln.weight, ln.variance_epsilon), W if perm is None else W.index_select(0, perm), b)


FUSED = True
"""Keep fewer activations: each RMSNorm fused with the projection after it and SwiGLU with the down
projection (``rlvr.accel.packed_fused``: they save the norm's input / ``[g | u]`` only), and attention saving
the packed heads instead of the padded view (``PackedCausalAttention``). The outputs and every gradient are
the unfused graph's bit for bit (``tests/unit/accel/test_packed_fused.py``); ``False``: the unfused graph."""


def _pair_permutation(Hqk: int, Hkv: int, D: int, device) -> torch.Tensor:
    """Rows of the fused q/k/v weight reordered so that each q and k head's half-split RoPE layout
    ``(j, j + D/2)`` becomes adjacent pairs ``(2j, 2j + 1)``; v's rows unchanged. One tensor per shape and
    device (its identity keys the stacked weight :func:`~rlvr.accel.packed_fused.fused_weight` keeps)."""
    key = (Hqk, Hkv, D, str(device))
    perm = _PERMS.get(key)
    if perm is None:
        half = torch.arange(D // 2, device=device)
        one = torch.stack([half, half + D // 2], -1).reshape(-1)
        qk = (one[None, :] + D * torch.arange(Hqk, device=device)[:, None]).reshape(-1)
        perm = _PERMS[key] = torch.cat([qk, torch.arange(Hqk * D, (Hqk + Hkv) * D, device=device)])
    return perm


_PERMS: dict[tuple, torch.Tensor] = {}


def _cat_bias(*mods) -> torch.Tensor | None:
    if all(m.bias is None for m in mods):
        return None
    return torch.cat([m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in mods])


COMPLEX_ROPE = True
"""fp32/fp64 without autocast: RoPE as one in-place complex multiply on pair-permuted q/k (else HF's
``q cos + rotate_half(q) sin``, which costs a concatenation, a negation and three more elementwise ops)."""

ATTENTION = "recompute"
"""``bmm``: scores, softmax and values as batched matmuls with an additive causal mask (autograd saves the
``[H·B, L, L]`` probabilities); ``recompute``: the same ops in
:class:`rlvr.accel.packed_attention.CausalAttention`, which saves only q, k, v and recomputes the
probabilities in backward (same values, same gradient, less activation memory); ``sdpa``:
``scaled_dot_product_attention(is_causal=True)``. On CPU at the tiny models' shapes (rows × heads ≈ 256,
length ≤ 64, head dim 32) bmm measured ~1.5× faster forward+backward than SDPA's flash kernel."""


def _attention(view: torch.Tensor, pk: Packing, Hq: int, Hkv: int, scale: float) -> torch.Tensor:
    """Causal attention of each row on its own tokens: ``view [Hq + 2 Hkv, B*L, D]`` (q, k, v heads on the
    padded view) -> ``[Hq, N, D]`` for the packed tokens. Head-major layout: every head's ``[B, L, D]``
    block is contiguous, so the batched matmuls need no copies."""
    B, L, D = pk.B, pk.L, view.shape[-1]
    q, k, v = view.split([Hq, Hkv, Hkv], dim=0)
    if ATTENTION == "sdpa":
        q, k, v = (t.view(-1, B, L, D).transpose(0, 1) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=Hq != Hkv)
        o = o.transpose(0, 1).reshape(Hq, B * L, D)
    elif ATTENTION == "recompute":
        if Hq != Hkv:
            k, v = (t.repeat_interleave(Hq // Hkv, dim=0) for t in (k, v))
        o = causal_attention(q.reshape(Hq * B, L, D), k.reshape(Hq * B, L, D), v.reshape(Hq * B, L, D), scale)
        o = o.view(Hq, B * L, D)
    else:
        if Hq != Hkv:
            k, v = (t.repeat_interleave(Hq // Hkv, dim=0) for t in (k, v))
        mask = torch.full((L, L), float("-inf"), dtype=view.dtype, device=view.device).triu_(1)
        s = torch.baddbmm(mask.expand(Hq * B, L, L), q.reshape(Hq * B, L, D),
                          k.reshape(Hq * B, L, D).transpose(1, 2), alpha=scale)
        o = torch.bmm(torch.softmax(s, dim=-1), v.reshape(Hq * B, L, D)).view(Hq, B * L, D)
    return o if pk.identity else o.index_select(1, pk.owner_view)


def _to_view(t: torch.Tensor, pk: Packing) -> torch.Tensor:
    """Packed heads ``[H, N, D]`` -> the attention view ``[H, B*L, D]`` (zeros on padding)."""
    if pk.identity:
        return t.contiguous()
    src = t if pk.slot_tok is None else t.index_select(1, pk.slot_tok)
    return scatter_to_view(src, pk.slot_view, pk.B * pk.L)


def packed_states(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  wanted: torch.Tensor | None = None, share_prefix: bool = True):
    """``(hidden [M', hidden], targets [M'], where [M])``: the final hidden states of the real tokens that have a
    successor in their row (and, given ``wanted [B, T]``, only where that successor is wanted), the successor
    token, and its flat index in ``[B*T]`` (where its logprob belongs). The lm_head is not applied: the core
    runs it chunked with the log-softmax (``rlvr.models.lm_head``). ``M' >= M``: under CPU bf16 autocast the
    rows are rounded up (:data:`AUTOCAST_ROWS`) with dummy rows (target 0) whose outputs nothing reads.

    ``share_prefix``: prefixes common to several rows are computed once (see :class:`Packing`)."""
    dev = input_ids.device.type
    rows = AUTOCAST_ROWS if dev == "cpu" and torch.is_autocast_enabled(dev) else 0
    pk = Packing(input_ids, attention_mask, share_prefix, pad_to=rows)
    h = packed_hidden(model, pk)
    succ = torch.nonzero(pk.slot_rank > 0).squeeze(-1)        # real slots with a predecessor in their row
    if wanted is not None:
        succ = succ[wanted.reshape(-1)[pk.slot_flat[succ]].bool()]
    src = succ - 1 if pk.slot_tok is None else pk.slot_tok[succ - 1]
    targets = pk.slot_ids[succ]
    M = src.numel()
    if rounded_rows(M, rows) > M:  # the logit rows rounded up as the packed tokens
        src = torch.cat([src, src.new_zeros(rounded_rows(M, rows) - M)])
        targets = torch.cat([targets, targets.new_zeros(src.numel() - M)])
    return h.index_select(0, src), targets, pk.slot_flat[succ]


def packed_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  wanted: torch.Tensor | None = None, share_prefix: bool = True):
    """``(logits [M, V], targets [M], where [M])``: :func:`packed_states` with the lm_head applied to all M rows at
    once (the full logits; tests and tools compare them with HF's)."""
    h, targets, where = packed_states(model, input_ids, attention_mask, wanted, share_prefix)
    M = where.numel()
    return F.linear(h, model.lm_head.weight)[:M], targets[:M], where


AUTOCAST_ROWS = 4
"""Under CPU bf16 autocast, the packed token count and the logit row count are rounded up to one of
``AUTOCAST_ROWS`` steps per power of two (:func:`rounded_rows`: 1000 -> 1024, 1100 -> 1280; at most +25%,
~12% on average), so ragged batches reuse a few GEMM shapes (see :class:`Packing`). Measured (12 GRPO
updates on fresh ragged batches, ``VmHWM`` MiB, one thread): 1m fp32 508, bf16 with a fixed 64-row
rounding 564 and still growing, with a fixed 256-row rounding 520 (flat); but a fixed 256 rounding costs
the budget's small DPO micro-batches (~400 tokens) up to +60% of the GEMM rows: the 5m DPO step's bf16/fp32
CPU time went from 0.64 to 1.0. Four steps per octave: 1m 541 (0.187 s/update), 5m 629 (fp32 582, fixed 256:
605), DPO 5m bf16/fp32 0.67 again. Without rounding the bf16 GRPO bench's rlvr process peaked at 1173 MB
at 5m (664 MB in fp32)."""


def rounded_rows(n: int, steps: int) -> int:
    """``n`` rounded up to a multiple of ``2^floor(log2 n) / steps`` (at least 16); ``steps`` 0: ``n``."""
    if steps <= 0 or n <= 16:
        return n
    q = max(16, (1 << (n.bit_length() - 1)) // steps)
    return -(-n // q) * q
