"""The output projection chunked with the log-softmax (rlvr.models.lm_head): values and gradients equal the
full-logits computation, and the largest tensor of a logprob step (forward and backward) grows with the
chunk, never with tokens x vocabulary. A small model with a large vocabulary (hidden 32, vocab 50k)."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rlvr.losses.entropy import entropy_rows
from rlvr.losses.sft import sft_loss
from rlvr.models.hf import import_transformers
from rlvr.models.lm_head import chunk_rows, split_head
from rlvr.models.logprobs import position_ids_from_mask, token_logprobs, token_nll
from rlvr.models.truncation import Truncation

import_transformers()
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

V, H = 50_000, 32


@pytest.fixture(scope="module")
def big_vocab():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=V, hidden_size=H, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=64, max_position_embeddings=64, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg).float()
    with torch.no_grad():  # logits of a realistic spread (random init gives ~uniform ones)
        model.model.embed_tokens.weight.normal_(0, 0.1)
    return model


def batch(B=3, T=12, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (B, T), generator=g)
    att = torch.ones(B, T, dtype=torch.long)
    att[1, :3] = 0  # left padding
    att[2, -2:] = 0  # right padding
    lm = att.clone().float()
    lm[:, :4] = 0
    return ids, att, lm


def full_logits_reference(model, ids, att, temperature):
    """The plain computation: the model's [B, T, V] logits, log-softmax and entropy on all of them."""
    logits = model(input_ids=ids, attention_mask=att, position_ids=position_ids_from_mask(att)).logits[:, :-1]
    z = logits.float() / temperature
    logp = torch.log_softmax(z, -1)
    lp = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)
    ent = entropy_rows(z.reshape(-1, V)).view(lp.shape)  # logsumexp(z) - sum softmax(z) z, unchunked
    pad = torch.zeros_like(lp[:, :1])
    return torch.cat([pad, lp], 1), torch.cat([pad, ent], 1)


def grads(model, loss):
    model.zero_grad()
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_close(a, b, rel=1e-5):
    scale = b.abs().max().clamp_min(1e-12)
    assert float((a - b).abs().max() / scale) <= rel, float((a - b).abs().max() / scale)


@pytest.mark.parametrize("packed", [False, None])  # None: the packed forward when the accelerations are on
def test_logprobs_entropy_and_gradients_equal_the_full_logits(big_vocab, packed, monkeypatch):
    from rlvr.models import lm_head

    monkeypatch.setattr(lm_head, "_CHUNK", [5])  # 22 tokens: 5 chunks, the last one ragged
    model = big_vocab
    ids, att, lm = batch()
    adv = torch.linspace(-1, 1, ids.numel()).view(ids.shape)
    lp_ref, ent_ref = full_logits_reference(model, ids, att, 0.7)
    g_ref = grads(model, (lp_ref * adv * lm).sum() + 0.3 * (ent_ref * lm).sum())
    lp, ent = token_logprobs(model, ids, att, 0.7, with_entropy=True, entropy_grad=True, wanted=lm, packed=packed)
    m = lm.bool()
    assert_close(lp[m], lp_ref[m])
    assert_close(ent[m], ent_ref[m])
    g = grads(model, (lp * adv * lm).sum() + 0.3 * (ent * lm).sum())
    assert g.keys() == g_ref.keys() and "model.embed_tokens.weight" in g  # tied head: one parameter
    for name in g_ref:
        assert_close(g[name], g_ref[name])


def test_automatic_chunk_bounds_the_logits():
    assert chunk_rows(151_936) * 151_936 <= 1 << 25 and chunk_rows(151_936) >= 200
    assert chunk_rows(105) > 100_000  # the tiny models: one chunk for any micro-batch


def test_chunk_size_does_not_change_values_or_gradients(big_vocab, monkeypatch):
    from rlvr.models import lm_head

    model = big_vocab
    ids, att, lm = batch(seed=2)
    out = {}
    for rows in (1, 7, 10_000):
        monkeypatch.setattr(lm_head, "_CHUNK", [rows])
        lp, _ = token_logprobs(model, ids, att, 1.0, wanted=lm, packed=False,
                               truncation=Truncation(top_p=0.9, top_k=50))
        out[rows] = (lp.detach(), grads(model, (lp * lm).sum()))
    for rows in (1, 7):
        assert_close(out[rows][0], out[10_000][0])
        for name, g in out[10_000][1].items():
            assert_close(out[rows][1][name], g)


def test_sft_nll_equals_sft_loss_on_full_logits(big_vocab):
    model = big_vocab
    ids, att, lm = batch(seed=3)
    att[:] = 1
    logits = model(input_ids=ids, attention_mask=att, position_ids=position_ids_from_mask(att)).logits
    ref_sum, n_ref, met_ref = sft_loss(logits, ids, lm, shift=True)
    g_ref = grads(model, ref_sum)
    nll, hits = token_nll(model, ids, att, lm)
    assert nll.numel() == n_ref
    assert_close(nll.sum().detach(), ref_sum.detach())
    assert int(hits.sum()) == round(met_ref["sft/token_accuracy"] * n_ref)
    g = grads(model, nll.sum())
    for name in g_ref:
        assert_close(g[name], g_ref[name])


def test_lora_model_splits_at_its_base_decoder(big_vocab):
    import copy

    from rlvr.config.model import LoraConfig
    from rlvr.models.load import add_lora

    model = add_lora(copy.deepcopy(big_vocab), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert split_head(model) is not None
    ids, att, lm = batch(seed=4)
    lp_ref, _ = full_logits_reference(model, ids, att, 1.0)
    lp, _ = token_logprobs(model, ids, att, wanted=lm, packed=False)
    assert_close(lp[lm.bool()], lp_ref[lm.bool()])


class LargestTensor(TorchDispatchMode):
    """The most elements of any tensor an op produced (forward and backward, recomputation included)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def largest_in_step(model, ids, att, lm, rows, monkeypatch, sft=False):
    from rlvr.models import lm_head

    monkeypatch.setattr(lm_head, "_CHUNK", [rows])
    with LargestTensor() as mode:
        if sft:
            loss = token_nll(model, ids, att, lm)[0].sum()
        else:
            lp, ent = token_logprobs(model, ids, att, 1.0, with_entropy=True, entropy_grad=True, wanted=lm)
            loss = (lp * lm).sum() + (ent * lm).sum()
        loss.backward()
    model.zero_grad()
    return mode.largest


@pytest.mark.parametrize("sft", [False, True])
def test_largest_tensor_grows_with_the_chunk_not_with_tokens_times_vocab(big_vocab, monkeypatch, sft):
    model = big_vocab
    ids, att, lm = batch(B=4, T=40, seed=5)
    att[:] = 1
    lm[:] = 1
    n = int(lm[:, 1:].sum())  # 156 tokens get a logprob
    small = largest_in_step(model, ids, att, lm, 40, monkeypatch, sft)
    large = largest_in_step(model, ids, att, lm, 80, monkeypatch, sft)
    # the largest tensors are one chunk's [rows, V] logits (and the [V, H] weight gradient, 32 x V)
    assert small == 40 * V and large == 80 * V, (small, large)
    assert large < n * V / 1.9


@pytest.mark.parametrize("wrap", [False, True])  # a plain Linear (its own backward) / any module (checkpointed)
@pytest.mark.parametrize("bf16", [False, True])
def test_head_paths_equal_the_full_logits(wrap, bf16):
    from rlvr.models.lm_head import head_logprobs

    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 3000, bias=True)
    head = torch.nn.Sequential(lin) if wrap else lin
    h = torch.randn(23, 16, requires_grad=True)
    tgt = torch.randint(0, 3000, (23,))
    w = torch.linspace(-1, 1, 23)

    def run(chunk):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = head_logprobs(head, h, tgt, 0.8, entropy="grad", hits=True, chunk=chunk)
        loss = (out.logprobs * w).sum() + 0.5 * out.entropy.sum()
        g = torch.autograd.grad(loss, [h, lin.weight, lin.bias])
        return out, g

    full, g_full = run(10_000)
    part, g_part = run(4)
    rel = 1e-2 if bf16 else 1e-5
    assert_close(part.logprobs.detach(), full.logprobs.detach(), rel)
    assert_close(part.entropy.detach(), full.entropy.detach(), rel)
    assert torch.equal(part.hits, full.hits)
    for a, b in zip(g_part, g_full):
        assert_close(a, b, rel)


def test_recipe_logit_chunk_is_set_when_the_model_loads(monkeypatch):
    from pydantic import ValidationError

    from rlvr.config.model import ModelConfig, TinyModel
    from rlvr.models import lm_head
    from rlvr.models.load import load_model_and_tokenizer

    monkeypatch.setattr(lm_head, "_CHUNK", [None])
    load_model_and_tokenizer(ModelConfig(tiny=TinyModel(size="test"), logit_chunk=7))
    assert chunk_rows(V) == 7
    load_model_and_tokenizer(ModelConfig(tiny=TinyModel(size="test")))
    assert chunk_rows(V) == (1 << 25) // V
    with pytest.raises(ValidationError, match="logit_chunk"):
        ModelConfig(tiny=TinyModel(size="test"), logit_chunk=0)


def test_final_hidden_states_skip_the_logits_and_equal_the_whole_forwards(big_vocab):
    from rlvr.models.lm_head import final_hidden_states

    ids, att, _ = batch(seed=6)
    with torch.no_grad():
        whole = big_vocab(input_ids=ids, attention_mask=att, output_hidden_states=True).hidden_states[-1]
        calls = []
        hook = big_vocab.lm_head.register_forward_hook(lambda m, i, o: calls.append(1))
        try:
            split = final_hidden_states(big_vocab, input_ids=ids, attention_mask=att)
        finally:
            hook.remove()
    assert torch.equal(split, whole) and not calls  # the head never ran


@pytest.mark.parametrize("trunc", [Truncation(), Truncation(top_p=0.9, top_k=50)])
@pytest.mark.parametrize("bf16", [False, True])
def test_frozen_head_gradient_is_computed_with_the_forward(trunc, bf16):
    """A frozen head (LoRA) with only the logprobs differentiable: the chunked path's gradient w.r.t. the hidden
    states equals the full-logits computation's, and its backward creates nothing of the vocabulary's size (the
    slope d lp / d h was taken while each chunk's logits existed: no recomputation)."""
    from rlvr.models.lm_head import head_logprobs

    torch.manual_seed(0)
    head = torch.nn.Linear(16, 3000, bias=True).requires_grad_(False)
    h = torch.randn(23, 16, requires_grad=True)
    tgt = torch.randint(0, 3000, (23,))
    w = torch.linspace(-1, 1, 23)

    def run(chunk, entropy):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = head_logprobs(head, h, tgt, 0.8, trunc, entropy=entropy, hits=True, chunk=chunk)
        loss = (out.logprobs * w).sum()
        with LargestTensor() as mode:
            (g,) = torch.autograd.grad(loss, [h])
        return out, g, mode.largest

    full, g_full, _ = run(10_000, "detached")  # one chunk: plain autograd through the kept logits
    for entropy in (None, "detached"):
        part, g_part, largest = run(4, entropy)
        rel = 1e-2 if bf16 else 1e-5
        assert_close(part.logprobs.detach(), full.logprobs.detach(), rel)
        if entropy:
            assert_close(part.entropy, full.entropy, rel)
        assert torch.equal(part.hits, full.hits)
        assert_close(g_part, g_full, rel)
        assert largest <= h.numel(), largest  # the backward is g_lp * slope: [23, 16]
