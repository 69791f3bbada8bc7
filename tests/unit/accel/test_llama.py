"""rlvr's own Llama-family module (rlvr.accel.llama) against transformers' classes: the same logits and
gradients, the same files both ways, picked by the loader only where it applies."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from rlvr.accel.llama import NativeCausalLM, from_hf, is_native, native_reason
from rlvr.config.model import LoraConfig, ModelConfig
from rlvr.errors import ModelLoadError
from rlvr.models.checkpoint import save_pretrained_atomic
from rlvr.models.load import load_model_and_tokenizer, load_pretrained
from rlvr.models.tiny import build_tiny

SRC = Path(__file__).resolve().parents[3] / "src"
SMALL = {"vocab_size": 105, "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 96,
         "max_position_embeddings": 128, "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1}


def llama_untied_bias():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(num_attention_heads=4, num_key_value_heads=4, attention_bias=True, mlp_bias=True,
                                        tie_word_embeddings=False, **SMALL))


def qwen2_gqa():
    torch.manual_seed(1)
    return Qwen2ForCausalLM(Qwen2Config(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                                        rope_theta=5000.0, **SMALL))


def mistral_linear_rope():
    torch.manual_seed(2)
    return MistralForCausalLM(MistralConfig(num_attention_heads=4, num_key_value_heads=1, sliding_window=None,
                                            rope_scaling={"rope_type": "linear", "factor": 2.0}, **SMALL))


MAKERS = [llama_untied_bias, qwen2_gqa, mistral_linear_rope]


def batch():
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 105, (3, 11), generator=g)
    att = torch.ones_like(ids)
    att[0, :4] = 0  # left padding
    att[2, 8:] = 0  # right padding
    return ids, att, (att.cumsum(-1) - 1).clamp_min(0)


def perturb(model):
    """Non-trivial norm weights and biases (HF initialises them to 1 and 0)."""
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith(("norm.weight", "bias")):
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model


@pytest.mark.parametrize("make", MAKERS)
def test_logits_and_gradients_equal_transformers(make):
    hf = perturb(make())
    nat = from_hf(hf)
    assert is_native(nat) and not is_native(hf)
    assert list(nat.state_dict()) == list(hf.state_dict())
    ids, att, pos = batch()
    a = nat(input_ids=ids, attention_mask=att, position_ids=pos).logits
    b = hf(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False).logits
    real = att.bool()
    torch.testing.assert_close(a[real], b[real], rtol=1e-5, atol=1e-5)
    assert a[~real].abs().max() == 0  # padding positions hold zeros
    w = torch.randn(b.shape, generator=torch.Generator().manual_seed(5)) * real[..., None]
    (a * w).sum().backward()
    (b * w).sum().backward()
    named = dict(hf.named_parameters())
    assert len(named) == len(dict(nat.named_parameters()))
    for n, p in nat.named_parameters():
        g = named[n].grad
        assert float((p.grad - g).norm()) <= 1e-5 * float(g.norm()) + 1e-7, n


def test_hidden_states_and_tied_weights_survive_deepcopy():
    hf = qwen2_gqa()
    nat = from_hf(hf)
    ids, att, pos = batch()
    out = nat(input_ids=ids, attention_mask=att, output_hidden_states=True)
    ref = hf(input_ids=ids, attention_mask=att, position_ids=pos, output_hidden_states=True, use_cache=False)
    torch.testing.assert_close(out.hidden_states[-1][att.bool()], ref.hidden_states[-1][att.bool()], rtol=1e-5, atol=1e-5)
    twin = copy.deepcopy(nat)
    assert twin.lm_head.weight is twin.model.embed_tokens.weight
    assert twin.config.to_dict() == nat.config.to_dict()


@pytest.mark.parametrize("make", MAKERS)
def test_files_load_both_ways(make, tmp_path):
    hf = perturb(make())
    hf.save_pretrained(tmp_path / "hf")
    nat = NativeCausalLM.from_pretrained(tmp_path / "hf")
    for (n, p), (m, q) in zip(nat.state_dict().items(), hf.state_dict().items()):
        assert n == m and torch.equal(p, q), n
    assert (nat.lm_head.weight is nat.model.embed_tokens.weight) == hf.config.tie_word_embeddings
    nat.save_pretrained(tmp_path / "native")
    back = AutoModelForCausalLM.from_pretrained(tmp_path / "native")
    assert type(back) is type(hf)
    for (n, p), (m, q) in zip(back.state_dict().items(), hf.state_dict().items()):
        assert n == m and torch.equal(p, q), n
    saved = json.loads((tmp_path / "native" / "config.json").read_text())
    assert saved["architectures"] == [type(hf).__name__] and saved["dtype"] == "float32"


def test_loader_picks_native_where_it_applies(tmp_path):
    build_tiny(tmp_path / "m", size="test", seed=0)
    model, tok = load_pretrained(tmp_path / "m")
    assert is_native(model)
    assert not is_native(load_pretrained(tmp_path / "m", implementation="hf")[0])
    assert not is_native(load_model_and_tokenizer(ModelConfig(path=str(tmp_path / "m"), lora=LoraConfig(r=2)))[0])
    assert not is_native(load_model_and_tokenizer(ModelConfig(path=str(tmp_path / "m"), gradient_checkpointing=True))[0])
    with pytest.raises(ModelLoadError, match="lora"):
        load_model_and_tokenizer(ModelConfig(path=str(tmp_path / "m"), implementation="native", lora=LoraConfig(r=2)))
    save_pretrained_atomic(model, tok, tmp_path / "saved")  # rlvr's checkpoint writer on the native class
    again, _ = load_pretrained(tmp_path / "saved")
    assert all(torch.equal(p, q) for p, q in zip(again.parameters(), model.parameters()))


@pytest.mark.parametrize("edit, why", [
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}}, "rope type 'yarn'"),
    ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}, "architecture"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"quantization_config": {"quant_method": "bitsandbytes"}}, "quantised"),
])
def test_unsupported_configs_name_the_reason(edit, why, tmp_path):
    build_tiny(tmp_path / "m", size="test", seed=0)
    raw = {**json.loads((tmp_path / "m" / "config.json").read_text()), **edit}
    assert why in native_reason(raw)
    if "rope_parameters" in edit:  # transformers loads it: auto falls back, native refuses naming the path
        (tmp_path / "m" / "config.json").write_text(json.dumps(raw))
        assert not is_native(load_pretrained(tmp_path / "m")[0])
        with pytest.raises(ModelLoadError, match=f"{tmp_path / 'm'}.*yarn"):
            load_pretrained(tmp_path / "m", implementation="native")


def test_mistral_sliding_window_takes_transformers():
    raw = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 64, "num_attention_heads": 4,
           "sliding_window": 4096}
    assert native_reason(raw) == "a sliding attention window"


def test_engine_samples_the_same_with_either_class(tmp_path):
    from rlvr.rollout.engine import SamplingParams
    from rlvr.rollout.hf_engine import HFEngine

    build_tiny(tmp_path / "m", size="test", seed=0)
    outs = []
    for impl in ("native", "hf"):
        model, tok = load_pretrained(tmp_path / "m", implementation=impl)
        eng = HFEngine(model, tok)
        outs.append(eng.generate([tok("12*3=")["input_ids"], tok("7+5=")["input_ids"]],
                                 SamplingParams(n=3, temperature=1.0, max_new_tokens=12, seed=0)))
        assert eng.decode_path == "fast"
    assert outs[0].completion_ids == outs[1].completion_ids
    flat = [torch.tensor([x for row in o.old_logprobs for x in row]) for o in outs]
    torch.testing.assert_close(flat[0], flat[1])


LEAN = """
import json, sys
from rlvr import accel
accel.enable(True)
import torch
from rlvr.config.model import ModelConfig
from rlvr.config.optim import OptimConfig
from rlvr.models.load import load_model_and_tokenizer
from rlvr.models.logprobs import token_logprobs
from rlvr.trainers.common import build_optimizer, optimizer_step
model, tok = load_model_and_tokenizer(ModelConfig(path=sys.argv[1], device="cpu"))
opt, sched = build_optimizer(model, OptimConfig(lr=1e-3), 10)
ids = torch.tensor([tok("12*3=36")["input_ids"]] * 2)
lp, _ = token_logprobs(model, ids, torch.ones_like(ids))
lp.sum().backward()
optimizer_step(model, opt, sched, 1.0, float(lp.sum()))
print(json.dumps([type(model).__name__] + [m for m in ("torch._dynamo", "sympy", "transformers.modeling_utils")
                                            if m in sys.modules]))
"""


def test_a_training_step_imports_no_model_code_nor_dynamo(tmp_path):
    build_tiny(tmp_path / "m", size="test", seed=0)
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", LEAN, str(tmp_path / "m")], capture_output=True, text=True, env=env,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["NativeCausalLM"]


def test_hooks_and_kv_cache_run_on_transformers_forward_over_the_same_modules(tmp_path):
    from rlvr.rollout.engine import SamplingParams
    from rlvr.rollout.hf_engine import HFEngine

    build_tiny(tmp_path / "m", size="test", seed=0)
    nat, tok = load_pretrained(tmp_path / "m")
    hf, _ = load_pretrained(tmp_path / "m", implementation="hf")
    ids, att, pos = batch()
    def shift(module, args, out):  # a forward hook on the input embedding
        return out + 0.5

    handles = [m.get_input_embeddings().register_forward_hook(shift) for m in (nat, hf)]
    a = nat(input_ids=ids, attention_mask=att, position_ids=pos).logits
    b = hf(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False).logits
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, from_hf(hf)(input_ids=ids, attention_mask=att, position_ids=pos).logits)
    twin = nat.hf_twin()
    assert twin.model.embed_tokens is nat.model.embed_tokens and twin.lm_head.weight is nat.lm_head.weight
    assert [n for n, _ in nat.named_parameters()] == [n for n, _ in from_hf(hf).named_parameters()]  # none added
    outs = []
    for m in (nat, hf):  # the hook sends the engine to the HF decoder (a KV cache) on both
        eng = HFEngine(m, tok)
        outs.append(eng.generate([tok("12*3=")["input_ids"]], SamplingParams(n=2, max_new_tokens=8, seed=1)))
        assert eng.decode_path.startswith("hf:")
    assert outs[0].completion_ids == outs[1].completion_ids
    for h in handles:
        h.remove()


def test_engines_build_transformers_class_from_a_native_policy(tmp_path):
    from rlvr.models.export import base_config, plain_state_dict

    build_tiny(tmp_path / "m", size="test", seed=0)
    nat, _ = load_pretrained(tmp_path / "m")
    worker = AutoModelForCausalLM.from_config(base_config(nat))  # what the vLLM / Ray workers build
    worker.load_state_dict(plain_state_dict(nat))
    ids, att, pos = batch()
    torch.testing.assert_close(worker(input_ids=ids, attention_mask=att, position_ids=pos).logits[att.bool()],
                               nat(input_ids=ids, attention_mask=att, position_ids=pos).logits[att.bool()])
