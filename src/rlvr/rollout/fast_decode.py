"""A lean decoder forward for Llama-architecture causal LMs (Llama, Qwen2, Mistral) used by HFEngine.

HF's ``LlamaForCausalLM.forward`` costs ~2 ms of Python and dispatch per call on CPU whatever the batch
(module calls, mask building, output dataclasses, cache objects), ~40% of a tiny model's decode step.
``FastDecoder`` computes the same function with a flat loop of tensor ops on the HF model's own
Parameters (read in place: training updates are seen at the next ``generate()``, nothing is synced):

    h = embed(ids)
    for each layer:  h = h + W_o · attn(RoPE(W_q x), RoPE(W_k x), W_v x),  x = RMSNorm(h)
                     h = h + W_down · (SiLU(W_gate x) ⊙ W_up x),           x = RMSNorm(h)
    logits = W_lm · RMSNorm(h[:, -1])

with ``RMSNorm(x) = w ⊙ x / sqrt(mean(x²) + eps)`` (Zhang & Sennrich 2019), rotary embeddings
``RoPE(x)_j = x_j cos(p θ_j) - x_{j+D/2} sin(p θ_j)`` (Su et al. 2021; θ from the model's own
``inv_freq`` buffer, so rope_theta and static scalings — linear, llama3, yarn — are honoured), grouped
query attention (``num_key_value_heads`` ≤ heads) and causal + left-padding masks.

What makes it cheaper, per decode step:
- Q, K and V come from one matmul with a fused weight built once per ``FastDecoder`` (one
  ``generate()`` batch; the engine runs under no_grad and weights do not change inside it) and dropped
  with it: a copy of the Q/K/V weights (10-25% of a decoder's weights) for the length of one batch.
  Its Q and K rows are permuted per head from HF's half-split RoPE layout ``(j, j + D/2)`` to adjacent
  pairs, so RoPE is one in-place complex multiply (float32/64; four real ops in half precision).
  Attention scores ``q·k`` are unchanged by a permutation applied to both q and k; V and W_o are not
  permuted. The MLP and output weights are views of the Parameters;
- gate and up projections are one matmul (fused weight) when the copy is ≤ ``FUSE_MAX_BYTES``;
  otherwise two matmuls on views of the HF weights;
- residual adds are fused into the output matmuls (``addmm``); everything is 2-D ``[rows, hidden]``;
  the fused matmuls write into preallocated buffers whose views (RoPE pairs, new K/V in cache layout,
  q for attention, gate/up halves) are made once per row count, not per layer and token;
- K and V of all layers live in one preallocated buffer ``[L, 2, B, H_kv, capacity, D]``, written in
  place; a new token's attention is two batched matmuls on views of it (:func:`_decode_attention`,
  ~1.3x faster than ``scaled_dot_product_attention`` there; the prompt pass uses SDPA); dropping finished
  rows copies only the rows that move;
- the padding mask is one preallocated additive buffer; logits are computed for the last position only;
- the prompt pass computes each distinct prompt once (a GRPO group repeats its prompt G times) and
  copies its K/V to the group's rows.

``unsupported_reason(model, capacity)`` says why a model cannot take this path (HFEngine then uses the
HF forward): another architecture, a peft/LoRA-wrapped or otherwise non-plain projection module, forward
hooks, a dynamic RoPE type (dynamic, longrope), an active sliding window shorter than the sequence,
an activation other than SiLU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlvr import hooks
from rlvr.models.arch import llama_family_reason

"""RoPE types whose inverse frequencies are fixed at init (read from the model's ``inv_freq`` buffer)."""
FUSE_MAX_BYTES = 1 << 30
"""Fuse gate/up weights (a per-generate copy) only when the copy is at most this many bytes."""


def _plain_linear(m) -> bool:
    return type(m) is torch.nn.Linear


def base_model(model):
    """The causal LM under a peft wrapper (``model`` itself when not wrapped)."""
    wrapped = hasattr(model, "peft_config") and hasattr(model, "get_base_model")
    return model.get_base_model() if wrapped else model


def unsupported_reason(model, capacity: int) -> str | None:
    """None when ``model`` can run on FastDecoder for sequences of ``capacity`` positions, else why not.

    A peft wrapper is looked through; LoRA (active or merged) leaves non-plain projection modules, and
    prompt-learning adapters change the input: both fall back to the HF forward.
    """
    if model is not base_model(model):
        active = getattr(model, "active_peft_config", None)
        if getattr(active, "is_prompt_learning", False):
            return "a peft prompt-learning adapter is active"
        model = base_model(model)
    why = llama_family_reason(model)
    if why:
        return why
    name, cfg, inner = type(model).__name__, model.config, model.model
    window = getattr(cfg, "sliding_window", None)
    sliding = window is not None and (name == "MistralForCausalLM" or "sliding_attention" in (
        getattr(cfg, "layer_types", None) or []))
    if sliding and capacity > window:
        return f"sliding_window {window} < {capacity} positions"
    if type(inner.embed_tokens) is not torch.nn.Embedding or not _plain_linear(model.lm_head):
        return "embed_tokens / lm_head are not plain Embedding / Linear modules"
    if model.lm_head.bias is not None:
        return "lm_head has a bias"
    for i, layer in enumerate(inner.layers):
        att, mlp = layer.self_attn, layer.mlp
        projs = [att.q_proj, att.k_proj, att.v_proj, att.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
        if not all(_plain_linear(p) for p in projs):
            return f"layer {i} has non-plain projection modules (LoRA adapters, quantisation, ...)"
        if att.head_dim % 2:
            return f"odd head_dim {att.head_dim}"
    if len(inner.layers) != getattr(cfg, "num_hidden_layers", len(inner.layers)):
        return "config.num_hidden_layers differs from the number of layers"
    if any(m._forward_hooks or m._forward_pre_hooks or hasattr(m, "_hf_hook") for m in model.modules()):
        return "the model has forward hooks (or accelerate hooks)"
    if not all(p.is_floating_point() for p in model.parameters()):
        return "non-floating-point parameters"
    return None


def _pair_permutation(heads: int, d: int, device) -> torch.Tensor:
    """Row order that turns each head's half-split layout (j, j + D/2) into adjacent pairs (2j, 2j+1)."""
    half = torch.arange(d // 2, device=device)
    one = torch.stack([half, half + d // 2], -1).reshape(-1)  # 0, D/2, 1, D/2+1, ...
    return (one[None, :] + d * torch.arange(heads, device=device)[:, None]).reshape(-1)


class _Layer:
    """The tensors of one decoder layer: norms, fused QKV (RoPE-permuted), W_o, MLP weights (views)."""

    __slots__ = ("bmlp", "bo", "bqkv", "ln1", "ln2", "wd_t", "wg_t", "wgu_t", "wo_t", "wqkv_t", "wu_t")

    def __init__(self, layer, perm_qk: torch.Tensor, fuse_mlp: bool, cd=None):
        att, mlp = layer.self_attn, layer.mlp
        c = (lambda t: t) if cd is None else (lambda t: None if t is None else t.to(cd))  # matmul copies
        self.ln1, self.ln2 = layer.input_layernorm.weight, layer.post_attention_layernorm.weight
        qk = torch.cat([att.q_proj.weight, att.k_proj.weight])[perm_qk]
        self.wqkv_t = c(torch.cat([qk, att.v_proj.weight])).t()
        if att.q_proj.bias is not None:
            self.bqkv = c(torch.cat([torch.cat([att.q_proj.bias, att.k_proj.bias])[perm_qk], att.v_proj.bias]))
        else:
            self.bqkv = None
        self.wo_t, self.bo = c(att.o_proj.weight).t(), c(att.o_proj.bias)
        biases = (c(mlp.gate_proj.bias), c(mlp.up_proj.bias), c(mlp.down_proj.bias))
        self.bmlp = biases if any(b is not None for b in biases) else None
        fused = fuse_mlp and self.bmlp is None  # else gate and up as two matmuls: only one form is built (a copy
        # each in the compute dtype)
        self.wgu_t = c(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])).t() if fused else None
        self.wg_t, self.wu_t = (None, None) if fused else (c(mlp.gate_proj.weight).t(), c(mlp.up_proj.weight).t())
        self.wd_t = c(mlp.down_proj.weight).t()


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's RMSNorm, op for op: ``w * (x / sqrt(mean(x²) + eps))`` in float32, cast back before ``w *``."""
    xf = x.float()
    y = torch.mul(xf, xf.pow(2).mean(-1, keepdim=True).add_(eps).rsqrt_())
    return y.mul_(w) if x.dtype == torch.float32 else w * y.to(x.dtype)


def distinct_rows(key: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
    """``(first [U], inv [B])`` of the rows of ``key [B, K]``: the first row of each distinct one and each row's
    distinct one (``key[first][inv] == key``); ``first`` None when all ``B`` rows differ."""
    uniq, inv = torch.unique(key, dim=0, return_inverse=True)
    B, U = key.shape[0], uniq.shape[0]
    if U == B:
        return None, inv
    first = torch.full((U,), B, dtype=torch.long, device=key.device).scatter_reduce_(
        0, inv, torch.arange(B, device=key.device), "amin")
    return first, inv


class FastDecoder:
    """KV-cached forward over a left-padded batch; returns last-position logits ``[rows, vocab]``.

    ``prompt_mask [B, P]`` is 1 on prompt tokens and 0 on left padding; ``capacity`` is the number of
    positions the cache holds (prompt + new tokens). Call it once with the left-padded prompts
    ``ids, pos [B, P]`` (``prefill``), then once per token with ``ids, pos [rows, 1]`` (``step``), under
    ``torch.no_grad()``; ``select(keep)`` keeps only rows ``keep`` (indices into the current rows, any
    order) for all later calls. Check ``unsupported_reason(model, capacity)`` first.

    ``compute_dtype`` (bf16 autocast's numerics, as the packed training forward runs them): the projections
    run in that dtype on copies of the weights made once per decoder, everything else as the fp32 weights
    (residual stream, norms, the KV cache and attention; q, k, v rounded to the compute dtype after RoPE, as
    the training forward keeps them): on a CPU with bf16 units the 5m tiny model's decode ran ~1.4x faster.

    ``kernel``: each ``step`` is the ``decode_step`` hook's (``rlvr.hooks``; with the accelerations on, one call
    into a C kernel on these same buffers (float32), or C calls between torch's bf16 matmuls (``compute_dtype``
    bf16; the KV cache is then kept in bf16: its values are bf16-rounded either way): :mod:`rlvr.accel.decode_step`);
    ``kernel_reason`` says why not where it does not apply. The 1m tiny model's 64-row float32 decode ran ~1.35x faster with the same samples, the 5m model's
    bf16 decode ~1.6x.
    """

    @torch.no_grad()
    def __init__(self, model, prompt_mask: torch.Tensor, capacity: int, compute_dtype: torch.dtype | None = None,
                 kernel: bool = True):
        model = base_model(model)
        inner = model.model
        a0 = inner.layers[0].self_attn
        w = inner.embed_tokens.weight
        self.dtype, dev = w.dtype, w.device
        self.D = a0.head_dim
        self.H, self.Hkv = a0.q_proj.out_features // self.D, a0.k_proj.out_features // self.D
        self.scale = float(a0.scaling)
        perm = _pair_permutation(self.H + self.Hkv, self.D, dev)
        mlp0 = inner.layers[0].mlp
        fuse_mlp = 2 * mlp0.gate_proj.weight.numel() * w.element_size() * len(inner.layers) \
            <= FUSE_MAX_BYTES
        cd = compute_dtype if compute_dtype not in (None, self.dtype) else None
        self.cd = cd
        self.layers = [_Layer(layer, perm, fuse_mlp, cd) for layer in inner.layers]
        self.eps = [(la.input_layernorm.variance_epsilon, la.post_attention_layernorm.variance_epsilon)
                    for la in inner.layers]
        self.embed, self.lm_t = w, (model.lm_head.weight if cd is None else model.lm_head.weight.to(cd)).t()
        self.norm, self.norm_eps = inner.norm.weight, inner.norm.variance_epsilon
        self.cis = _rope_table(inner.rotary_emb, capacity, self.dtype, dev)
        B, P = prompt_mask.shape
        self.rows, self.t, self.capacity = B, 0, capacity
        kw = {"dtype": self.dtype, "device": dev}
        step_hook = hooks.HOOKS.decode_step
        self.kernel, self.kernel_reason = None, "kernel=False" if not kernel else "no decode_step hook"
        if kernel and step_hook is not None:  # the per-token step as one C call where it applies (rlvr.hooks)
            self.kernel_reason = step_hook.reason(self)
        # K and V in the compute dtype when the C step runs bf16 projections: they are bf16 values either way
        # (rounded by the projection), so the cache holds the same numbers in half the bytes the step reads
        kv_dtype = cd if cd is not None and self.kernel_reason is None else self.dtype
        self.kv = torch.empty(len(self.layers), 2, B, self.Hkv, capacity, self.D, dtype=kv_dtype, device=dev)
        ckw, rows = (kw, B) if cd is None else ({"dtype": cd, "device": dev}, _bucket(B))
        self._qkv = torch.empty(rows, (self.H + 2 * self.Hkv) * self.D, **ckw)
        self._gu = torch.empty(rows, 2 * mlp0.gate_proj.out_features if fuse_mlp else 0, **ckw)
        self._views = None
        self.min = torch.finfo(self.dtype).min
        self.padded = bool((prompt_mask == 0).any())
        self.mask = None
        if self.padded:  # additive: `min` on left padding, 0 on prompt and generated positions
            self.mask = torch.zeros(B, capacity, dtype=self.dtype, device=dev)
            self.mask[:, :P].masked_fill_(prompt_mask == 0, self.min)
        if self.kernel_reason is None:
            self.kernel = step_hook.bind(self)

    def __call__(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """The prompt's forward on the first call, one token's afterwards."""
        return self.prefill(ids, pos) if self.t == 0 else self.step(ids, pos)

    def prefill(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """The prompts' forward; a prompt repeated in several rows (a GRPO group) is computed once."""
        B, P = ids.shape
        pad = self.mask[:, :P] != 0 if self.padded else None
        first, inv = distinct_rows(ids if pad is None else torch.cat([ids, pad.long()], 1))
        U = B if first is None else first.shape[0]
        if first is not None:
            ids, pos, pad = ids[first], pos[first], None if pad is None else pad[first]
        mask = None
        if pad is not None:
            causal = torch.ones(P, P, dtype=torch.bool, device=ids.device).tril()
            keep = causal[None] & ~pad[:, None, :]
            mask = torch.zeros(U, 1, P, P, dtype=self.dtype, device=ids.device)
            mask.masked_fill_(~keep[:, None], self.min)
        logits = self._forward(ids, pos, mask, causal=pad is None)
        if first is None:
            return logits
        self.kv[:, :, :B, :, :P] = self.kv[:, :, inv, :, :P]  # row b's cache = its prompt's
        return logits[inv]

    def step(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """One token per row: ``_forward`` with T = 1, into preallocated buffers."""
        if self.kernel is not None:
            return self.kernel.step(self, ids, pos)
        B, t = ids.shape[0], self.t
        if t + 1 > self.capacity:
            raise ValueError(f"FastDecoder: {t + 1} positions exceed the cache capacity {self.capacity}")
        if self._views is None or self._views[0] != B:
            self._views = self._make_views(B)
        _, qk, kv_new, q, g, u = self._views  # the matmuls write self._qkv / self._gu, these read them
        mask = self.mask[:B, None, :t + 1] if self.padded else None
        h = F.embedding(ids.reshape(-1), self.embed)
        cis = self.cis.index_select(0, pos.reshape(-1)).unsqueeze(1)
        slots = self.kv[:, :, :B, :, t].unbind(0)  # per layer [2, B, Hkv, D]: where this token's K, V go
        Hkv, D = self.Hkv, self.D
        # per layer, K and V as [B * Hkv, t + 1, D] views of the cache (no copy: a row's heads are adjacent)
        ks = self.kv[:, 0, :B, :, :t + 1].reshape(len(self.layers), B * Hkv, t + 1, D).unbind(0)
        vs = self.kv[:, 1, :B, :, :t + 1].reshape(len(self.layers), B * Hkv, t + 1, D).unbind(0)
        HD = self.H * D
        cd = self.cd
        for L, (eps1, eps2), slot, k, v in zip(self.layers, self.eps, slots, ks, vs):
            x = _to(_rms(h, L.ln1, eps1), cd)
            if L.bqkv is None:
                torch.mm(x, L.wqkv_t, out=self._qkv[:x.shape[0]])  # bf16: rows bucketed (``_to``)
            else:
                torch.addmm(L.bqkv, x, L.wqkv_t, out=self._qkv[:x.shape[0]])
            _rope_(qk, cis)
            slot.copy_(kv_new)
            o = _decode_attention(q, k, v, mask, self.scale).view(B, HD)
            h = _add_proj(h, o, L.wo_t, L.bo)
            x = _to(_rms(h, L.ln2, eps2), cd)
            if L.wgu_t is None or L.bmlp is not None:
                h = self._mlp(h, x, L)
                continue
            torch.mm(x, L.wgu_t, out=self._gu[:x.shape[0]])
            h = _add_proj(h, F.silu(g, inplace=True).mul_(u), L.wd_t, None)
        self.t = t + 1
        return torch.mm(_to(_rms(h, self.norm, self.norm_eps), cd), self.lm_t)[:B]

    def _make_views(self, B: int):
        """Views of the step buffers for ``B`` rows: the fused QKV output's RoPE'd (q, k) pairs, the new
        (K, V) in cache layout, q for attention, and the fused gate/up output's halves."""
        H, Hkv, D = self.H, self.Hkv, self.D
        qkv = self._qkv[:B]
        pairs = qkv[:, :(H + Hkv) * D].view(B, H + Hkv, D // 2, 2)
        qk = torch.view_as_complex(pairs) if self.cis.is_complex() and self.cd is None else pairs
        kv_new = qkv[:, H * D:].view(B, 2, Hkv, D).transpose(0, 1)
        q = qkv[:, :H * D].view(B, Hkv, H // Hkv, D)  # the query heads of each K/V head (GQA) together
        gu = self._gu[:B]
        half = gu.shape[1] // 2
        return B, qk, kv_new, q, gu[:, :half], gu[:, half:]

    def select(self, keep: torch.Tensor) -> None:
        """Keep rows ``keep`` (indices into the current rows, any order): new row i is old row ``keep[i]``.

        Only rows whose position changes are copied (``keep[i] != i``), so the swap-remove order the
        engine uses (a finished row's slot is filled by a live row from the tail) costs one row's cache
        per finished row, not a copy of the whole cache."""
        n, t = len(keep), self.t
        moved = (keep != torch.arange(n, device=keep.device)).nonzero().squeeze(-1)
        if len(moved):
            src = keep.index_select(0, moved)  # gathered before written: any overlap is safe
            self.kv[:, :, moved, :, :t] = self.kv[:, :, src, :, :t]
            if self.padded:
                self.mask[moved] = self.mask[src]
        self.rows = n

    def _forward(self, ids, pos, mask, causal: bool) -> torch.Tensor:
        """``T`` tokens per row (the prompt pass): K, V written at ``t .. t+T``; last-position logits."""
        B, T = ids.shape
        H, Hkv, D, t0 = self.H, self.Hkv, self.D, self.t
        t1 = t0 + T
        if t1 > self.capacity:
            raise ValueError(f"FastDecoder: {t1} positions exceed the cache capacity {self.capacity}")
        h = F.embedding(ids.reshape(-1), self.embed)
        cis = self.cis.index_select(0, pos.reshape(-1)).unsqueeze(1)  # [B*T, 1, D/2]
        gqa = H != Hkv
        cd = self.cd
        for i, L in enumerate(self.layers):
            eps1, eps2 = self.eps[i]
            x = _to(_rms(h, L.ln1, eps1), cd)
            qkv = (torch.mm(x, L.wqkv_t) if L.bqkv is None else torch.addmm(L.bqkv, x, L.wqkv_t))[:B * T]
            pairs = qkv[:, :(H + Hkv) * D].view(B * T, H + Hkv, D // 2, 2)
            _rope_(torch.view_as_complex(pairs) if cis.is_complex() and cd is None else pairs, cis)
            self.kv[i, :, :B, :, t0:t1] = qkv[:, H * D:].view(B, T, 2, Hkv, D).permute(2, 0, 3, 1, 4)
            q = qkv[:, :H * D].view(B, T, H, D).transpose(1, 2).to(self.dtype)
            k, v = self.kv[i, 0, :B, :, :t1].to(self.dtype), self.kv[i, 1, :B, :, :t1].to(self.dtype)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and T > 1,
                                               scale=self.scale, enable_gqa=gqa)
            o = o.transpose(1, 2).reshape(B * T, H * D)
            h = _add_proj(h, o, L.wo_t, L.bo)
            x = _to(_rms(h, L.ln2, eps2), cd)
            h = self._mlp(h, x, L)
        self.t = t1
        last = h.view(B, T, -1)[:, -1]
        return torch.mm(_to(_rms(last, self.norm, self.norm_eps), cd), self.lm_t)[:B]

    @staticmethod
    def _mlp(h, x, L):
        if L.bmlp is not None:
            x = x[:h.shape[0]]  # bf16 rows bucketed by ``_to``
            bg, bu, bd = L.bmlp
            g, u = F.linear(x, L.wg_t.t(), bg), F.linear(x, L.wu_t.t(), bu)
            return h + F.linear(F.silu(g) * u, L.wd_t.t(), bd)
        if L.wgu_t is not None:
            g, u = torch.mm(x, L.wgu_t).chunk(2, dim=-1)
        else:
            g, u = torch.mm(x, L.wg_t), torch.mm(x, L.wu_t)
        return _add_proj(h, F.silu(g).mul_(u), L.wd_t, None)


ROW_BUCKET = 16
"""bf16 projections run on row counts rounded up to a multiple of this (zero rows appended, their outputs
dropped): every distinct GEMM shape costs oneDNN a JIT-compiled bf16 kernel kept for the process's life
(~0.6 MB; the live rows of a decode batch take every value from 64 down as rows finish, and 100 shapes
measured +148 MB), so a decode batch of up to 64 rows compiles at most 4 row counts per projection. Measured,
30 bf16 ``generate()`` calls of 64 rows: RSS +140 MB at 1m and +164 MB at 5m without the rounding, +47 and
+98 MB with it (most of the rest: the KV cache and the weight copies, freed with the decoder)."""


def _bucket(n: int) -> int:
    return -(-n // ROW_BUCKET) * ROW_BUCKET


def _to(x: torch.Tensor, dtype) -> torch.Tensor:
    """``x`` unchanged (``dtype`` None), or cast to ``dtype`` with its rows padded by zeros to :func:`_bucket`."""
    if dtype is None:
        return x
    n, m = x.shape[0], _bucket(x.shape[0])
    if m == n:
        return x.to(dtype)
    out = x.new_zeros((m, *x.shape[1:]), dtype=dtype)
    out[:n] = x
    return out


def _add_proj(h: torch.Tensor, x: torch.Tensor, w_t: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """``h + x w_t (+ b)``: one ``addmm`` when all share h's dtype; else the projection in ``w_t``'s dtype
    (the compute dtype), added to the wider residual stream."""
    if w_t.dtype == h.dtype:
        return torch.addmm(h, x, w_t) if b is None else torch.addmm(h + b, x, w_t)
    xc = _to(x, w_t.dtype)
    y = torch.mm(xc, w_t) if b is None else torch.addmm(b, xc, w_t)
    return h + y[:h.shape[0]]


def _decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                      scale: float) -> torch.Tensor:
    """One new token's attention: ``q [B, Hkv, g, D]`` (the g query heads sharing each K/V head), ``k, v
    [B·Hkv, t, D]`` (cache views), ``mask [B, 1, t]`` additive or None -> ``[B·Hkv, g, D]``.

    ``softmax(q kᵀ · scale + mask) v`` as two batched matmuls: at decode shapes (one query per row, tiny
    heads) measured ~1.3x faster than ``scaled_dot_product_attention``'s CPU kernel (64 rows, 4-8 heads,
    30-60 positions: 69-185 µs vs 100-320 µs)."""
    q = q.reshape(k.shape[0], q.shape[2], q.shape[3]).to(k.dtype)  # a copy: q is a view of the fused QKV output
    s = torch.baddbmm(q.new_empty(()), q, k.transpose(1, 2), beta=0.0, alpha=scale)   # [B·Hkv, g, t]
    if mask is not None:
        B = mask.shape[0]
        s.view(B, -1, s.shape[-1]).add_(mask)
    return torch.bmm(torch.softmax(s, dim=-1), v)


def _rope_table(rot, capacity: int, dtype, device) -> torch.Tensor:
    """``(cos + i sin)(p θ_j)`` for positions ``p < capacity``, as HF computes them (float32, scaled,
    cast to the model's dtype); complex for float32/64, ``[capacity, D/2, (cos, sin)]`` otherwise."""
    inv = rot.inv_freq.to(device=device, dtype=torch.float)
    freqs = torch.arange(capacity, device=device)[:, None].float() * inv
    scale = rot.attention_scaling
    cos, sin = (freqs.cos() * scale).to(dtype), (freqs.sin() * scale).to(dtype)
    if dtype in (torch.float32, torch.float64):
        return torch.complex(cos, sin)
    return torch.stack([cos, sin], -1)  # [capacity, D/2, 2]: rotated with real ops


def _rope_(qk: torch.Tensor, cis: torch.Tensor) -> None:
    """Rotate pairs in place: ``qk`` is a complex view ``[rows, heads, D/2]`` (multiplied by ``cis
    [rows, 1, D/2]``) or, for half precision, a real view ``[rows, heads, D/2, 2]`` (``cis [.., 2]``)."""
    if qk.is_complex():
        qk.mul_(cis)
        return
    if cis.is_complex():  # low-precision pairs, float32 table: rotate in float32, round once (as autocast does)
        qk.copy_(torch.view_as_real(torch.view_as_complex(qk.float()) * cis))
        return
    a, b = qk[..., 0], qk[..., 1]
    c, s = cis[..., 0], cis[..., 1]
    a2 = a * c - b * s
    qk[..., 1] = b * c + a * s
    qk[..., 0] = a2
