"""A group's shared prompt forwarded once per pass on the HF path (``rlvr.models.prefix_share``; ``packed=False``:
not the accelerations' packed forward, which shares it its own way): the same
logprobs and gradients as the whole rows, the prompt computed once, and the cases where nothing is shared."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaForCausalLM

from rlvr.models.logprobs import token_logprobs
from rlvr.models.prefix_share import MIN_SHARED, shared_length, shared_prefixes, supports
from rlvr.models.tiny import tiny_config

V = 300


def model(seed: int = 0):
    torch.manual_seed(seed)
    return LlamaForCausalLM(tiny_config("test", vocab_size=V)).float()


def group_rows(prompt_len: int, rows: int, total: int, seed: int):
    """``rows`` right-padded rows that share one ``prompt_len``-token prompt, their completions of varied
    lengths; the loss mask on the completions."""
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, V, (1, prompt_len), generator=g)
    ids = torch.cat([prompt.expand(rows, -1), torch.randint(0, V, (rows, total - prompt_len), generator=g)], 1)
    att = torch.ones(rows, total, dtype=torch.long)
    for r in range(rows):
        att[r, total - (r % 3) * 2:] = 0
    lm = att.float()
    lm[:, :prompt_len] = 0
    return ids, att, lm


def grads(m) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    m.zero_grad(set_to_none=True)
    return out


def assert_grads_close(a: dict, b: dict, rel: float = 1e-5):
    assert a.keys() == b.keys()
    for n in a:
        scale = float(b[n].abs().max()) + 1e-12
        assert float((a[n] - b[n]).abs().max()) / scale < rel, n


def whole_rows(m, batches, weights):
    """Logprobs and parameter gradient of ``sum_i w_i · Σ lp_i`` forwarding each micro-batch's whole rows."""
    lps = []
    for (ids, att, lm), w in zip(batches, weights):
        lp, _ = token_logprobs(m, ids, att, wanted=lm, packed=False)
        (w * (lp * lm).sum()).backward()
        lps.append(lp.detach())
    return lps, grads(m)


def with_prefix(m, batches, weights):
    lps = []
    with shared_prefixes() as cache:
        for (ids, att, lm), w in zip(batches, weights):
            lp, _ = token_logprobs(m, ids, att, wanted=lm, prefix=cache, packed=False)
            (w * (lp * lm).sum()).backward()
            lps.append(lp.detach())
    return lps, grads(m), cache


def one_row_micro_batches(ids, att, lm):
    return [(ids[r:r + 1], att[r:r + 1], lm[r:r + 1]) for r in range(ids.shape[0])]


def test_a_groups_rows_one_a_micro_batch_get_the_whole_rows_logprobs_and_gradient_with_the_prompt_run_once():
    m = model()
    ids, att, lm = group_rows(prompt_len=9, rows=4, total=20, seed=1)
    batches = one_row_micro_batches(ids, att, lm)
    weights = [0.5, -1.0, 2.0, 0.25]
    lp_ref, g_ref = whole_rows(m, batches, weights)
    lp, g, cache = with_prefix(m, batches, weights)
    for a, b in zip(lp, lp_ref):
        assert torch.allclose(a, b, atol=2e-6)
        assert bool((a[:, :9] == 0).all())  # nothing asked inside the prompt
    assert_grads_close(g, g_ref)
    # the prompt less its last token (whose hidden state predicts the first completion token), run once
    assert cache.prefix_tokens == 8
    assert cache.shared_tokens == 4 * 8


def test_two_groups_in_turn_and_a_micro_batch_of_several_rows_keep_the_gradient_exact():
    """A micro-batch holding a group's rows together, and the next group's rows one by one: the first
    group's pending gradient is backpropagated when the second's prompt replaces it."""
    m = model(1)
    a = group_rows(prompt_len=7, rows=3, total=15, seed=2)
    b = group_rows(prompt_len=11, rows=2, total=18, seed=3)
    batches = [a, *one_row_micro_batches(*b)]
    weights = [1.0, 0.3, -0.7]
    lp_ref, g_ref = whole_rows(m, batches, weights)
    lp, g, cache = with_prefix(m, batches, weights)
    for x, y in zip(lp, lp_ref):
        assert torch.allclose(x, y, atol=2e-6)
    assert_grads_close(g, g_ref)
    assert cache.prefix_tokens == 6 + 10


def test_lora_on_some_projections_only_gets_the_adapters_gradient_through_the_prompt():
    """LoRA on q and v only: the first layer's cached keys carry no gradient, later ones do (through the
    hidden states); the adapters' gradient equals the whole rows'."""
    from peft import LoraConfig, get_peft_model

    m = get_peft_model(model(2), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False))
    ids, att, lm = group_rows(prompt_len=10, rows=3, total=19, seed=4)
    batches = one_row_micro_batches(ids, att, lm)
    _, g_ref = whole_rows(m, batches, [1.0, 1.0, 1.0])
    _, g, _ = with_prefix(m, batches, [1.0, 1.0, 1.0])
    assert g_ref and all("lora" in n for n in g_ref)
    assert_grads_close(g, g_ref)


def test_without_gradient_the_reference_pass_and_the_first_update_read_the_same_bits():
    """The no-grad pass (reference, recomputed old logprobs) and the update cut the rows alike and share the
    prompt alike: their logprobs are equal bit for bit (KL exactly 0 while the policy is the reference)."""
    m = model(3)
    ids, att, lm = group_rows(prompt_len=8, rows=4, total=16, seed=5)
    batches = one_row_micro_batches(ids, att, lm)
    with torch.no_grad():
        ref, _, _ = with_prefix_no_backward(m, batches)
    upd, _, _ = with_prefix(m, batches, [1.0] * 4)
    for x, y in zip(ref, upd):
        assert torch.equal(x, y)


def with_prefix_no_backward(m, batches):
    lps = []
    with shared_prefixes() as cache:
        for ids, att, lm in batches:
            lps.append(token_logprobs(m, ids, att, wanted=lm, prefix=cache, packed=False)[0])
    return lps, None, cache


def test_rows_that_share_too_little_or_ask_inside_the_prompt_are_forwarded_whole():
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12], [5, 6, 7, 8, 9, 10, 13, 14]])
    att = torch.ones_like(ids)
    lm = torch.zeros(2, 8)
    lm[:, 6:] = 1
    assert shared_length(ids, att, lm) == 5           # the common prompt less the token before the first asked
    assert shared_length(ids, att, None) == 0         # nothing asked: nothing known to be a prompt
    other = ids.clone()
    other[1, 2] = 99
    assert shared_length(other, att, lm) == 2 < MIN_SHARED
    none_asked = lm.clone()
    none_asked[1] = 0
    assert shared_length(ids, att, none_asked) == 0   # a row with no trained token
    padded = att.clone()
    padded[1, 0] = 0
    assert shared_length(ids, padded, lm) == 0        # a left-padded row shares no real prefix
    m = model(4)
    with shared_prefixes() as cache:
        lp, _ = token_logprobs(m, other, att, wanted=lm, prefix=cache, packed=False)
    assert cache.prefix_tokens == 0
    with torch.no_grad():
        whole, _ = token_logprobs(m, other, att, wanted=lm, packed=False)
    assert torch.equal(lp.detach(), whole)


@pytest.mark.parametrize("cfg,ok", [
    (dict(layer_types=["full_attention"] * 2), True),
    (dict(layer_types=["full_attention", "sliding_attention"]), False),
    (dict(sliding_window=4096, use_sliding_window=True), False),
    (dict(sliding_window=4096, use_sliding_window=False), True),
    (dict(sliding_window=None), True),
    (dict(is_encoder_decoder=True), False),
])
def test_only_full_causal_attention_decoders_share(cfg, ok):
    assert supports(SimpleNamespace(config=SimpleNamespace(**cfg))) is ok


def test_gradient_checkpointing_trains_on_whole_rows():
    """A checkpointed layer recomputes its forward in the backward, which would append its keys to a cache
    twice: under autograd such a decoder forwards whole rows (the gradient is the whole rows'), without
    autograd it shares the prompt."""
    m = model(5)
    m.gradient_checkpointing_enable()
    m.train()
    ids, att, lm = group_rows(prompt_len=9, rows=3, total=17, seed=6)
    batches = one_row_micro_batches(ids, att, lm)
    _, g_ref = whole_rows(m, batches, [1.0, -1.0, 0.5])
    _, g, cache = with_prefix(m, batches, [1.0, -1.0, 0.5])
    assert cache.prefix_tokens == 0
    assert_grads_close(g, g_ref)
    with torch.no_grad():
        _, _, cache = with_prefix_no_backward(m, batches)
    assert cache.prefix_tokens == 8


def test_a_decoder_that_fills_no_cache_is_forwarded_whole(monkeypatch):
    """A decoder whose forward ignores the cache it is given would run the continuations without their prompt:
    the cache's length is checked (here: the prefix's forward left it empty) and the rows are forwarded whole."""
    from rlvr.models import prefix_share

    m = model(6)
    ids, att, lm = group_rows(prompt_len=9, rows=2, total=16, seed=7)

    monkeypatch.setattr(prefix_share, "_layers", lambda cache: [])  # the prefix's forward left nothing
    with torch.no_grad(), shared_prefixes() as cache:
        lp, _ = token_logprobs(m, ids, att, wanted=lm, prefix=cache, packed=False)
        whole, _ = token_logprobs(m, ids, att, wanted=lm, packed=False)
    assert cache.prefix_tokens == 0 and cache.shared_tokens == 0
    assert torch.equal(lp, whole)
