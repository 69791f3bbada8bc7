"""The fused projections (norm_linear, swiglu_linear) and the packed attention against the plain autograd
expressions: the same output and gradients bit for bit, in float32 and under bf16 autocast, with fewer saved
tensors; and the whole packed forward's GRPO gradient with and without the fusions, bit for bit."""

import contextlib

import pytest
import torch
import torch.nn.functional as F

import rlvr.accel.packed_forward as pf
import rlvr.trainers.rl as rl
from rlvr.accel.packed_attention import causal_attention, packed_causal_attention, scatter_to_view
from rlvr.accel.packed_fused import norm_linear, rms, swiglu_linear
from rlvr.config.rl import GRPOLoss, KLConfig, RLStage, SamplingConfig
from rlvr.data.collate import TokenBatch
from rlvr.models.tiny import build_tiny


@pytest.fixture(autouse=True)
def pytorch_path(monkeypatch):
    """These tests pin the PyTorch path's bit-for-bit equalities: native kernels off unless a test turns them on
    (its C kernels sum in other orders; they are checked against these paths in test_norm_swiglu_native.py,
    test_packed_attention_native.py and below)."""
    monkeypatch.setenv("RLVR_KERNELS", "0")


def saved_bytes(fn):
    """Bytes of the non-leaf tensors autograd saves while ``fn()`` runs, and fn's result."""
    total = [0]

    def pack(t):
        if not (t.is_leaf and t.requires_grad):
            total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return total[0], out


def run(fused: bool, bias: bool, bf16: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    leaves = dict(h=torch.randn(37, 16, generator=g), w=torch.randn(16, generator=g), W=torch.randn(48, 16, generator=g),
                  Wd=torch.randn(16, 24, generator=g))
    if bias:
        leaves.update(b=torch.randn(48, generator=g), bd=torch.randn(16, generator=g))
    leaves = {k: v.requires_grad_() for k, v in leaves.items()}
    r = torch.randn(37, 16, generator=g)
    L = leaves

    def forward():
        h2 = L["h"] * 1.5  # a non-leaf input, as in the model
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if fused:
                gu = norm_linear(h2, L["w"], 1e-6, L["W"], L.get("b"))
                return swiglu_linear(gu, L["Wd"], L.get("bd"))
            gu = F.linear(rms(h2, L["w"], 1e-6), L["W"], L.get("b"))
            gate, up = gu.chunk(2, dim=-1)
            return F.linear(F.silu(gate) * up, L["Wd"], L.get("bd"))

    nbytes, out = saved_bytes(forward)
    (out.float() * r).sum().backward()
    return out.detach(), {k: v.grad for k, v in leaves.items()}, nbytes


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_fused_projections_equal_the_plain_expression_bit_for_bit(bf16, bias):
    out, grads, saved = run(True, bias, bf16)
    ref, ref_grads, ref_saved = run(False, bias, bf16)
    assert out.dtype == ref.dtype and torch.equal(out, ref)
    for k in grads:
        diff = float((grads[k] - ref_grads[k]).abs().max())
        assert float(grads[k].abs().max()) > 0 and torch.equal(grads[k], ref_grads[k]), f"d{k}: max |diff| {diff:.3g}"
    assert saved < 0.6 * ref_saved, (saved, ref_saved)


def test_norm_linear_saves_only_its_input_and_the_weights():
    h = torch.randn(5, 8, requires_grad=True)
    w, W = torch.randn(8, requires_grad=True), torch.randn(6, 8, requires_grad=True)
    out = norm_linear(h * 2, w, 1e-6, W)
    assert sorted(tuple(t.shape) for t in out.grad_fn.saved_tensors if t.numel()) == [(5, 1), (5, 8), (6, 8), (8,)]


def test_the_fused_gradient_moves_the_norm_weight_like_the_plain_one():
    """A gradient step through norm_linear changes w (the norm's weight) and h as the plain expression's."""
    out, grads, _ = run(True, False, False, seed=3)
    _, ref_grads, _ = run(False, False, False, seed=3)
    assert float(grads["w"].abs().max()) > 1e-3 and torch.equal(grads["w"], ref_grads["w"])


def packed_case(shared: bool, bf16: bool):
    """Three rows (lengths 4, 3, 5) of 2 heads x D 4; with ``shared`` the first two tokens of rows 0 and 2 are
    one packed token each (as a GRPO group's prompt)."""
    g = torch.Generator().manual_seed(1)
    H, D, B, L = 2, 4, 3, 5
    lens = [4, 3, 5]
    slot_view = torch.tensor([b * L + i for b, n in enumerate(lens) for i in range(n)])
    S = len(slot_view)
    if shared:  # row 2's first two slots read row 0's packed tokens 0 and 1
        slot_tok = torch.tensor([0, 1, 2, 3, 4, 5, 6, 0, 1, 7, 8, 9])
        N = 10
    else:
        slot_tok, N = None, S
    heads = torch.randn(3 * H, N, D, generator=g)
    do = torch.randn(H, B * L, D, generator=g)
    return heads, slot_tok, slot_view, B, L, H, do


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize("shared", [False, True], ids=["plain", "shared-prefix"])
def test_packed_attention_equals_scatter_then_attention(shared, bf16):
    heads, slot_tok, slot_view, B, L, H, _ = packed_case(shared, bf16)
    dummy = torch.randn(heads.shape[0], 1, heads.shape[2], generator=torch.Generator().manual_seed(4))
    heads = torch.cat([heads, dummy], 1)  # + a dummy (rounding) token
    D, N = heads.shape[-1], heads.shape[1]
    # each packed token's output is read at its first view slot; the dummy token's at slot 0 (a duplicate, as
    # Packing's rounding tokens read slot 0)
    owner = torch.full((N,), -1, dtype=torch.long)
    tok = slot_tok if slot_tok is not None else torch.arange(len(slot_view))
    for s_, t in reversed(list(enumerate(tok.tolist()))):
        owner[t] = slot_view[s_]
    owner[owner < 0] = 0
    do = torch.randn(N, H * D, generator=torch.Generator().manual_seed(5))
    results = []
    for fused in (True, False):
        x = heads.clone().requires_grad_()
        src = x.to(torch.bfloat16) if bf16 else x
        if fused:  # token-major heads, padding view positions reading token 0, outputs at each token's owner
            view_tok = tok.new_zeros(B * L).index_copy_(0, slot_view, tok)
            nbytes, o = saved_bytes(lambda: packed_causal_attention(src.transpose(0, 1), view_tok, owner, B, L, 0.5))
        else:
            def plain():
                # a bf16 gather done in float32: a shared token's rows summed in float32, rounded once (as the
                # fused backward's index_add)
                view = scatter_to_view(src.float().index_select(1, tok).to(src.dtype), slot_view, B * L)
                q, k, v = (t.reshape(H * B, L, D) for t in view.split([H, H, H], dim=0))
                o = causal_attention(q, k, v, 0.5).view(H, B * L, D).index_select(1, owner)
                return o.transpose(0, 1).reshape(len(owner), H * D)
            nbytes, o = saved_bytes(plain)
        (o.float() * do).sum().backward()
        results.append((o.detach(), x.grad, nbytes))
    (o1, g1, n1), (o2, g2, n2) = results
    assert torch.equal(o1, o2)
    assert torch.equal(g1, g2), f"max |diff| {float((g1 - g2).abs().max()):.3g}"
    assert n1 < n2  # the packed heads, not the [3H, B*L, D] view


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
def test_the_grpo_update_gradient_is_the_unfused_graphs_bit_for_bit(monkeypatch, bf16):
    """Prefix-shared rows, KL, entropy bonus: every parameter's gradient is the same with the fusions
    (``packed_forward.FUSED``) as without, and the fusions keep fewer tensors. The PyTorch path (native kernels
    off): the C kernels sum in other orders (next test)."""
    grads, nbytes = grpo_update_grads(monkeypatch, bf16)
    for a, b in zip(grads[True], grads[False]):
        assert torch.equal(a, b), f"max |diff| {float((a - b).abs().max()):.3g}"
    assert nbytes[True] < (0.9 if bf16 else 0.8) * nbytes[False], nbytes


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
def test_the_grpo_update_gradient_with_native_kernels_is_the_unfused_graphs(monkeypatch, bf16):
    """The same update with the C kernels (``rlvr/accel/kernels/``: the attention, RMSNorm and SwiGLU): every gradient
    equals the unfused graph's up to float32 summation order (bf16: up to the bf16 roundings the orders give)."""
    from rlvr.accel import packed_attention as pa

    monkeypatch.setenv("RLVR_KERNELS", "1")
    if pa._kernel_lib() is None:
        pytest.skip("native kernels cannot be built here")
    grads, nbytes = grpo_update_grads(monkeypatch, bf16)
    tol = 3e-2 if bf16 else 2e-5
    for a, b in zip(grads[True], grads[False]):
        scale = float(b.abs().max()) or 1.0
        assert float((a - b).abs().max()) <= tol * scale, f"max |diff| {float((a - b).abs().max()):.3g} of {scale:.3g}"
    assert nbytes[True] < (0.9 if bf16 else 0.8) * nbytes[False], nbytes


def grpo_update_grads(monkeypatch, bf16: bool):
    """Every parameter's gradient after one GRPO minibatch update with the fusions on and off, and the bytes each
    keeps for backward."""
    g = torch.Generator().manual_seed(2)
    prompts = [[4, 11, 12, 13, 14, 15], [4, 21, 22]]
    seqs = [prompts[i // 4] + torch.randint(3, 100, (n,), generator=g).tolist() for i, n in enumerate([5, 2, 7, 3, 6, 1, 9, 4])]
    masks = [[0] * len(prompts[i // 4]) + [1] * (len(s) - len(prompts[i // 4])) for i, s in enumerate(seqs)]
    cfg = RLStage(loss=GRPOLoss(), sampling=SamplingConfig(max_new_tokens=9, temperature=0.9), micro_batch_size=8,
                  kl=KLConfig(beta=0.04), entropy_coef=0.01)
    ref = build_tiny(size="test", seed=1)[0].eval()
    out = {}
    if bf16:  # the fused attention sums a shared token's bf16 row gradients in float32 and rounds once; autograd's
        # IndexSelectBackward of a bf16 gather rounds after every row: the unfused reference gathers in float32
        to_view = pf._to_view
        monkeypatch.setattr(pf, "_to_view", lambda t, pk: to_view(t.float(), pk).to(t.dtype))
    for fused in (True, False):
        monkeypatch.setattr(pf, "FUSED", fused)
        model = build_tiny(size="test", seed=0)[0]
        batch = TokenBatch.from_rows(seqs, masks, old_logprobs=[[0.0] * len(s) for s in seqs],
                                     advantages=[1.0, -0.5, 0.3, -1.2, 0.8, 0.1, -0.4, 0.2])
        batch.ref_logprobs = rl.reference_logprobs(ref, model, batch, 0.9, 8, bf16)
        nbytes, _ = saved_bytes(lambda: rl.update_minibatch(model, batch, cfg, on_policy=True, bf16=bf16))
        out[fused] = ([p.grad.clone() for p in model.parameters()], nbytes)
    return {k: v[0] for k, v in out.items()}, {k: v[1] for k, v in out.items()}


def test_the_stacked_weight_is_built_once_a_block_and_rebuilt_after_any_update():
    """Inside ``reuse_weights`` the q/k/v stack (RoPE-permuted) and its bf16 copy are built once and handed out
    again while the weights are unchanged; an in-place update of any of them (an optimizer step) or new storage
    makes the next call rebuild it with the new values; outside the block every call builds afresh."""
    from rlvr.accel import packed_fused as pfu
    g = torch.Generator().manual_seed(0)
    Ws = tuple(torch.randn(8, 4, generator=g).requires_grad_() for _ in range(3))
    perm = pf._pair_permutation(2, 1, 4, "cpu")
    assert perm is pf._pair_permutation(2, 1, 4, "cpu")
    assert pfu.fused_weight(Ws, perm, None) is not pfu.fused_weight(Ws, perm, None)
    with pfu.reuse_weights():
        for dtype in (None, torch.bfloat16):
            a = pfu.fused_weight(Ws, perm, dtype)
            assert a is pfu.fused_weight(Ws, perm, dtype) and not a.requires_grad
            assert torch.equal(a, torch.cat(Ws).index_select(0, perm).to(dtype or torch.float32))
        with torch.no_grad():
            Ws[1].add_(1.0)                                   # an optimizer's in-place step
        b = pfu.fused_weight(Ws, perm, None)
        assert b is not a and torch.equal(b, torch.cat(Ws).index_select(0, perm))
        Ws[2].data = torch.zeros(8, 4)                        # new storage (version unchanged)
        c = pfu.fused_weight(Ws, perm, None)
        assert torch.equal(c, torch.cat(Ws).index_select(0, perm))
    assert not pfu._BUILT


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
def test_micro_batches_sharing_the_built_weights_give_the_same_gradient_and_see_each_step(bf16):
    """Two micro-batches accumulated inside ``reuse_weights`` leave the gradient they leave one by one outside
    it, bit for bit; an optimizer step inside the block is seen by the next forward."""
    from rlvr.accel.packed_fused import reuse_weights
    from rlvr.models.logprobs import token_logprobs
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(3, 100, (6, 9), generator=g)
    att = torch.ones_like(ids)
    att[1, :3] = 0
    w = torch.randn(6, 9, generator=g)

    def loss(model, rows):
        lp, _ = token_logprobs(model, ids[rows], att[rows], 0.9, bf16=bf16)
        return (lp * w[rows]).sum()

    grads = []
    for block in (True, False):
        model = build_tiny(size="test", seed=0)[0]
        with reuse_weights() if block else contextlib.nullcontext():
            for rows in ([0, 1, 2], [3, 4, 5]):
                loss(model, rows).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        assert torch.equal(a, b), f"max |diff| {float((a - b).abs().max()):.3g}"
    model = build_tiny(size="test", seed=0)[0]
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with reuse_weights():
        before = float(loss(model, [0, 1]).detach())
        loss(model, [0, 1]).backward()
        opt.step()
        inside = float(loss(model, [0, 1]).detach())
    assert inside != before and inside == float(loss(model, [0, 1]).detach())
