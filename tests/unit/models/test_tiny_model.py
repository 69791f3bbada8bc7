"""The tiny model and character tokenizer load through the standard HF Auto* classes."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.models.tiny import SIZES, build_tiny, num_params


def test_auto_classes_load_saved_tiny(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    ids = tok("12+34=?", add_special_tokens=False)["input_ids"]
    assert len(ids) == 7  # one token per character
    assert tok.decode(ids) == "12+34=?"
    assert tok.padding_side == "left"
    assert tok.pad_token_id == 0 and tok.eos_token_id == 1
    out = model(torch.tensor([ids]))
    assert out.logits.shape == (1, 7, len(tok))


def test_chat_template_renders_roles(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    s = tok.apply_chat_template([{"role": "user", "content": "1+1=?"}], tokenize=False, add_generation_prompt=True)
    assert s == "<|user|>1+1=?<|end|><|assistant|>"


def test_build_is_deterministic_by_seed():
    a, _ = build_tiny(size="test", seed=3)
    b, _ = build_tiny(size="test", seed=3)
    c, _ = build_tiny(size="test", seed=4)
    for (n, p), (_, q), (_, r) in zip(a.named_parameters(), b.named_parameters(), c.named_parameters()):
        assert torch.equal(p, q), n
    assert any(not torch.equal(p, r) for p, r in zip(a.parameters(), c.parameters()))


def test_sizes_span_half_to_twenty_million():
    small, _ = build_tiny(size="0.5m")
    assert 0.3e6 < num_params(small) < 0.7e6
    assert SIZES["20m"][0] == 512  # ~20M (not built here: too slow for a unit test)
