"""FastDecoder computes HF's forward (logits within 1e-5 in fp32) and HFEngine samples the same with it."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from rlvr.data.chat import stop_token_ids
from rlvr.models.load import load_pretrained
from rlvr.rollout import fast_decode, hf_engine
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.fast_decode import FastDecoder, unsupported_reason
from rlvr.rollout.hf_engine import HFEngine

SMALL = {"vocab_size": 50, "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 96,
         "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "pad_token_id": 0}


def sharpen(model, scale: float = 1.5):
    """Random weights ~ N(0, scale² / fan_in) (vectors: 1 ± 0.1): attention is peaked and logits spread
    over several units, so a wrong mask, RoPE or head order moves them far more than the tolerance."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g) if p.dim() == 1 else
                    torch.randn(p.shape, generator=g) * scale / p.shape[-1] ** 0.5)
    return model.eval()


def llama_tied():
    return LlamaForCausalLM(LlamaConfig(**SMALL, num_attention_heads=4, num_key_value_heads=4,
                                        tie_word_embeddings=True, rope_parameters={"rope_type": "default",
                                                                                   "rope_theta": 10000.0}))


def llama_untied_biased_scaled_rope():
    # untied lm_head, biases on q/k/v/o and the MLP, GQA, linear RoPE scaling with a large theta
    return LlamaForCausalLM(LlamaConfig(**SMALL, num_attention_heads=4, num_key_value_heads=2,
                                        tie_word_embeddings=False, attention_bias=True, mlp_bias=True,
                                        rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                         "rope_theta": 500000.0}))


def qwen2_gqa():
    return Qwen2ForCausalLM(Qwen2Config(**SMALL, num_attention_heads=4, num_key_value_heads=2,
                                        tie_word_embeddings=False, rope_parameters={"rope_type": "default",
                                                                                    "rope_theta": 1e6}))


def batch(lengths, P, seed=0, dup_first=True):
    """Left-padded random prompts; row 1 repeats row 0 (a GRPO group: the prefill computes it once)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, SMALL["vocab_size"], (len(lengths), P), generator=g)
    att = torch.ones(len(lengths), P, dtype=torch.long)
    for i, n in enumerate(lengths):
        att[i, :P - n], ids[i, :P - n] = 0, 0
    if dup_first:
        ids[1], att[1] = ids[0], att[0]
    return ids, att


@torch.no_grad()
def hf_last_logits(model, ids, att):
    """Reference: HF's full (uncached) forward of each whole sequence, last position."""
    pos = (att.cumsum(-1) - 1).clamp_min(0)
    return model(input_ids=ids, attention_mask=att, position_ids=pos).logits[:, -1]


@torch.no_grad()
def check_against_hf(model, steps=6, drop_at=3, tol=1e-5, keep=(1, 2, 4, 5), bf16=False):
    """Max |FastDecoder - HF| over the logits of a prefill and ``steps`` tokens (``bf16``: the decoder's
    projections in bf16 against HF's forward under bf16 autocast)."""
    lengths, P = [5, 5, 2, 7, 1, 4], 7
    ids, att = batch(lengths, P)
    assert unsupported_reason(model, P + steps) is None
    dec = FastDecoder(model, att, P + steps, torch.bfloat16 if bf16 else None)
    logits = dec(ids, (att.cumsum(-1) - 1).clamp_min(0)).float()
    worst = 0.0
    for s in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            ref = hf_last_logits(model, ids, att).float()
        assert ref.abs().max() > 1.0  # the test model's logits are not all ~0
        worst = max(worst, float((logits - ref).abs().max()))
        if s == steps - 1:
            break
        nxt = ref.argmax(-1, keepdim=True)
        ids, att = torch.cat([ids, nxt], 1), torch.cat([att, torch.ones_like(nxt)], 1)
        if s == drop_at:  # row compaction: drop rows 0 and 3 (default)
            k = torch.tensor(keep)
            dec.select(k)
            ids, att = ids[k], att[k]
        logits = dec(ids[:, -1:], (att.cumsum(-1) - 1)[:, -1:]).float()
    assert worst <= tol, worst
    return worst


@pytest.mark.parametrize("build", [llama_tied, llama_untied_biased_scaled_rope, qwen2_gqa])
def test_fast_logits_equal_hf_on_left_padded_batches_with_row_drops(build):
    torch.manual_seed(0)
    check_against_hf(sharpen(build()))


@pytest.mark.parametrize("build", [llama_tied, llama_untied_biased_scaled_rope, qwen2_gqa])
def test_bf16_compute_follows_hf_under_bf16_autocast(build):
    """compute_dtype=bf16: bf16 projections, fp32 residual/norms/attention. Its logits stay within bf16
    rounding of HF's forward under autocast (logits span several units; a wrong cast or RoPE would not)."""
    torch.manual_seed(0)
    model = sharpen(build())
    assert check_against_hf(model, tol=0.08, bf16=True) > 1e-4  # it is really computing in bf16


def test_bf16_sampler_logprobs_are_close_to_the_bf16_training_forward(tiny_dir):
    """HFEngine(bf16=True) decodes on FastDecoder with bf16 projections; the logprobs it records for the
    sampled tokens are those the packed training forward gives under bf16 autocast, to bf16 rounding: the
    sampler/trainer gap the mismatch correction sees stays small (the HF forward under autocast: ~3x it)."""
    from rlvr.models.logprobs import token_logprobs

    model, tok = load_pretrained(tiny_dir)
    eng = HFEngine(model, tok, bf16=True)
    prompts = [tok(f"<|user|>{a}*{b}=?", add_special_tokens=False)["input_ids"] for a, b in ((12, 3), (40, 7))]
    g = eng.generate(prompts, SamplingParams(n=4, temperature=1.0, max_new_tokens=12, seed=3))
    assert eng.decode_path == "fast"
    rows = [p + c for p, c in zip(g.prompt_ids, g.completion_ids)]
    L = max(map(len, rows))
    ids = torch.tensor([r + [0] * (L - len(r)) for r in rows])
    att = torch.tensor([[1] * len(r) + [0] * (L - len(r)) for r in rows])
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, att, 1.0, bf16=True)
    gap = torch.cat([(lp[i, len(p):len(p) + len(c)] - torch.tensor(o)).abs()
                     for i, (p, c, o) in enumerate(zip(g.prompt_ids, g.completion_ids, g.old_logprobs))])
    assert gap.numel() > 10 and float(gap.mean()) < 2e-3 and float(gap.max()) < 0.05, (gap.mean(), gap.max())


@pytest.mark.parametrize("keep", [(5, 1, 2, 4), (0, 1, 2, 5, 4)])
def test_select_in_any_order_keeps_each_rows_cache(keep):
    """Swap-remove compaction: a finished row's slot takes a row from the tail (rows move out of order;
    rows 1, 2 or 0, 1, 2 stay where they are and are not copied)."""
    torch.manual_seed(0)
    check_against_hf(sharpen(qwen2_gqa()), keep=keep)


def test_swap_remove_fills_holes_from_the_tail():
    dead = torch.tensor([False, True, False, True, False, False, True, False])
    # 3 dead -> 5 rows kept: holes at 1 and 3 (the front 5) take the live rows of the tail (5 and 7)
    assert hf_engine.swap_remove(dead, 3).tolist() == [0, 5, 2, 7, 4]
    assert hf_engine.swap_remove(torch.tensor([False, False, True]), 1).tolist() == [0, 1]
    assert hf_engine.swap_remove(torch.tensor([True, True, False]), 2).tolist() == [2]


def test_unfused_mlp_path_and_unpadded_batches_also_match(monkeypatch):
    torch.manual_seed(0)
    model = sharpen(qwen2_gqa())
    monkeypatch.setattr(fast_decode, "FUSE_MAX_BYTES", 0)  # gate/up as two matmuls on views
    check_against_hf(model)
    with torch.no_grad():  # no padding at all: no mask, causal prefill
        ids, att = batch([6, 6, 6], 6, dup_first=False)
        dec = FastDecoder(model, att, 8)
        assert dec.mask is None
        got = dec(ids, (att.cumsum(-1) - 1))
        assert torch.allclose(got, hf_last_logits(model, ids, att), atol=1e-5)


def test_weights_are_read_in_place_and_updates_are_seen():
    torch.manual_seed(0)
    model = sharpen(llama_tied())
    _, att = batch([3, 3, 5], 5)
    dec = FastDecoder(model, att, 6)
    mlp = model.model.layers[0].mlp
    assert dec.layers[0].wd_t.data_ptr() == mlp.down_proj.weight.data_ptr()  # a view, not a copy
    assert dec.embed is model.model.embed_tokens.weight
    assert dec.lm_t.data_ptr() == dec.embed.data_ptr()  # tied lm_head: the embedding itself
    with torch.no_grad():
        mlp.down_proj.weight.mul_(-2.0)  # an optimizer step, in place
    check_against_hf(model)  # the next decoder (next generate call) computes the updated model


def test_bf16_compute_copies_each_weight_once(monkeypatch):
    """Under a compute dtype every projection weight is copied once: the fused gate/up or, unfused, the two
    separate ones, never both (each form is a copy of the MLP's largest weights)."""
    torch.manual_seed(0)
    model = sharpen(llama_tied())
    _, att = batch([3, 3, 5], 5)
    mlp = model.model.layers[0].mlp
    L = FastDecoder(model, att, 6, torch.bfloat16).layers[0]
    assert L.wgu_t is not None and L.wg_t is None and L.wu_t is None
    assert L.wgu_t.dtype == torch.bfloat16 and L.wgu_t.shape == (mlp.gate_proj.in_features, 2 * mlp.gate_proj.out_features)
    monkeypatch.setattr(fast_decode, "FUSE_MAX_BYTES", 0)
    L = FastDecoder(model, att, 6, torch.bfloat16).layers[0]
    assert L.wgu_t is None and L.wg_t.dtype == L.wu_t.dtype == torch.bfloat16


@torch.no_grad()
def test_bf16_weights_follow_hf_casts():
    torch.manual_seed(0)
    model = sharpen(qwen2_gqa()).to(torch.bfloat16)
    ids, att = batch([5, 5, 2, 7], 7)
    got = FastDecoder(model, att, 8)(ids, (att.cumsum(-1) - 1).clamp_min(0)).float()
    ref = hf_last_logits(model, ids, att).float()
    assert (got - ref).abs().max() <= 0.05 * ref.abs().max()  # bf16 rounding (matmul blocking) only


def engine_pair(tiny_dir, monkeypatch):
    model, tok = load_pretrained(tiny_dir)
    sharpen(model)  # peaked distributions: greedy and sampled paths differ visibly per row
    monkeypatch.setattr(hf_engine, "COMPACT_FRACTION", 0.01)  # drop finished rows at every step
    return model, tok, HFEngine(model, tok, fast_decode=True), HFEngine(model, tok, fast_decode=False)


@pytest.mark.parametrize("greedy", [True, False])
def test_engine_fast_and_hf_paths_sample_identically(tiny_dir, monkeypatch, greedy):
    _, tok, fast, slow = engine_pair(tiny_dir, monkeypatch)
    texts = ["<|user|>12+7=?<|end|><|assistant|>", "<|user|>3*4=?<|end|><|assistant|>", "<|user|>1=?"]
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    stops = stop_token_ids(tok) + tok("1", add_special_tokens=False)["input_ids"] + \
        tok("2", add_special_tokens=False)["input_ids"]
    params = SamplingParams(n=1 if greedy else 6, greedy=greedy, temperature=1.3, max_new_tokens=20, seed=5,
                            stop_token_ids=stops)
    selects = []
    orig = FastDecoder.select
    monkeypatch.setattr(FastDecoder, "select",
                        lambda self, keep: (selects.append(len(keep)), orig(self, keep)))
    a, b = fast.generate(prompts, params), slow.generate(prompts, params)
    assert fast.decode_path == "fast" and slow.decode_path == "hf: fast_decode=False"
    assert a.completion_ids == b.completion_ids and a.finish_reason == b.finish_reason
    for x, y in zip(a.old_logprobs, b.old_logprobs):
        assert torch.allclose(torch.tensor(x), torch.tensor(y), atol=1e-5)
    if not greedy:
        assert len({len(c) for c in a.completion_ids}) > 2 and selects  # rows finished apart and were dropped


def test_fallback_to_hf_forward_for_unsupported_models(tiny_dir):
    model, tok = load_pretrained(tiny_dir)
    params = SamplingParams(n=2, max_new_tokens=4, seed=0)
    prompts = [tok("<|user|>1+1=?", add_special_tokens=False)["input_ids"]]
    gelu = LlamaForCausalLM(LlamaConfig(**{**SMALL, "vocab_size": len(tok)}, num_attention_heads=4,
                                        hidden_act="gelu"))
    eng = HFEngine(gelu, tok)
    assert len(eng.generate(prompts, params).completion_ids) == 2
    assert eng.decode_path.startswith("hf: hidden_act 'gelu'")
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}
    dyn = LlamaForCausalLM(LlamaConfig(**SMALL, num_attention_heads=4, rope_parameters=dynamic))
    assert "rope type 'dynamic'" in unsupported_reason(dyn, 16)
    eng = HFEngine(model, tok, bf16=True)
    eng.generate(prompts, params)
    assert eng.decode_path == "fast"  # bf16: FastDecoder with bf16 projections
    peft = pytest.importorskip("peft")
    lora = peft.get_peft_model(model, peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    assert "non-plain projection modules" in unsupported_reason(lora, 16)
    eng = HFEngine(lora, tok)
    eng.generate(prompts, params)
    assert eng.decode_path.startswith("hf: layer 0 has non-plain projection modules")


def test_sliding_window_shorter_than_the_sequence_falls_back():
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(**SMALL, num_attention_heads=4, num_key_value_heads=2, sliding_window=8)
    m = MistralForCausalLM(cfg)
    assert unsupported_reason(m, 8) is None
    assert "sliding_window 8" in unsupported_reason(m, 9)
