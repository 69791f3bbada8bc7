"""Step checkpoints: weights, optimiser, scheduler, RNG and trainer state round-trip; keep-last pruning;
half-written (temp) directories are never listed."""

import random

import pytest
import torch

from rlvr.models.checkpoint import latest_checkpoint, list_checkpoints, load_training_state, save_training_checkpoint
from rlvr.models.tiny import build_tiny


def test_round_trip_and_pruning(tmp_path):
    model, tok = build_tiny(size="test", seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    for step in (1, 2, 3):
        model(input_ids=torch.tensor([[4, 5, 6]])).logits.sum().backward()
        opt.step(), sched.step(), opt.zero_grad()
        save_training_checkpoint(tmp_path, step, model, tok, opt, sched, {"cursor": step * 10}, keep_last=2)
    (tmp_path / ".step-000009.tmp-x").mkdir()                     # a half-written dir: never listed
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000002", "step-000003"]
    torch.manual_seed(123)
    random.seed(5)
    expect_torch, expect_py = torch.rand(1), random.random()
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    fresh, _ = build_tiny(size="test", seed=1)
    opt2 = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    sched2 = torch.optim.lr_scheduler.LambdaLR(opt2, lambda s: 1.0 / (s + 1))
    torch.manual_seed(123)
    random.seed(5)
    save_training_checkpoint(tmp_path, 4, model, tok, opt, sched, {"cursor": 40}, keep_last=0)
    st = load_training_state(latest_checkpoint(tmp_path), fresh, opt2, sched2)
    assert st["step"] == 4 and st["cursor"] == 40
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, saved[k]), k
    assert sched2.last_epoch == 3 and opt2.state_dict()["state"].keys() == opt.state_dict()["state"].keys()
    assert torch.rand(1) == expect_torch and random.random() == expect_py   # RNG restored to the save point


def _lora_model(tiny_dir, dtype="float32"):
    from rlvr.config.model import LoraConfig, ModelConfig
    from rlvr.models.load import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(ModelConfig(path=tiny_dir, dtype=dtype, lora=LoraConfig(r=4, alpha=8)))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # peft starts B at zero: give the adapters a delta to merge
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model, tok


def test_merged_copy_equals_a_full_copy_merged_and_shares_only_what_the_merge_leaves_alone(tiny_dir):
    import copy

    from rlvr.models.checkpoint import merged_copy

    model, _ = _lora_model(tiny_dir)
    live = {k: v.clone() for k, v in model.state_dict().items()}
    expected = copy.deepcopy(model).merge_and_unload().state_dict()
    merged = merged_copy(model)
    got = merged.state_dict()
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], expected[k]) for k in got)
    assert all(torch.equal(v, live[k]) for k, v in model.state_dict().items())  # the live model untouched
    live_ptrs = {t.data_ptr() for t in [*model.parameters(), *model.buffers()]}
    own = {t.data_ptr(): t.numel() for t in [*merged.parameters(), *merged.buffers()] if t.data_ptr() not in live_ptrs}
    adapted = sum(p.numel() for n, p in model.named_parameters() if ".base_layer." in n)
    assert adapted > 0 and sum(own.values()) == adapted  # new memory: the merged weights only
    assert merged.get_input_embeddings().weight.data_ptr() in live_ptrs


def test_a_lora_checkpoint_loads_as_the_merged_model(tiny_dir, tmp_path):
    import copy

    from transformers import AutoModelForCausalLM

    from rlvr.models.checkpoint import save_pretrained_atomic

    model, tok = _lora_model(tiny_dir)
    expected = copy.deepcopy(model).merge_and_unload().state_dict()
    save_pretrained_atomic(model, tok, tmp_path / "ckpt")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt").state_dict()
    assert all(torch.equal(loaded[k], expected[k]) for k in loaded)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])  # bf16: W += delta (float32) rounds once, as peft's merge
def test_a_lora_save_streams_the_merge_and_writes_what_the_merged_copy_writes(tiny_dir, tmp_path, monkeypatch, dtype):
    """The merged checkpoint of a plain LoRA model is written one merged weight at a time, without the merged
    copy: the same tensors (bit for bit), names and config as saving ``merge_and_unload()`` of a full copy."""
    import copy

    from safetensors.torch import load_file

    from rlvr.models import checkpoint
    from rlvr.models.checkpoint import save_pretrained_atomic

    model, tok = _lora_model(tiny_dir, dtype)
    copy.deepcopy(model).merge_and_unload().save_pretrained(tmp_path / "ref", safe_serialization=True)

    def no_copy(_):
        raise AssertionError("merged_copy called")

    monkeypatch.setattr(checkpoint, "merged_copy", no_copy)
    save_pretrained_atomic(model, tok, tmp_path / "ckpt")
    got, want = load_file(tmp_path / "ckpt" / "model.safetensors"), load_file(tmp_path / "ref" / "model.safetensors")
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    cfg = lambda d: {k: v for k, v in __import__("json").loads((d / "config.json").read_text()).items()
                     if k != "transformers_version"}
    assert cfg(tmp_path / "ckpt") == cfg(tmp_path / "ref")
    assert (tmp_path / "ckpt" / "generation_config.json").exists() == (tmp_path / "ref" / "generation_config.json").exists()


def test_a_lora_merge_that_is_not_an_addition_takes_the_merged_copy(tiny_dir, tmp_path):
    """DoRA rescales the merged weight by a learned magnitude: not streamed, saved through the merged copy,
    and what loads is the merged model."""
    import copy

    from transformers import AutoModelForCausalLM

    from rlvr.models.checkpoint import save_pretrained_atomic
    from rlvr.models.merged_save import merge_plan
    from rlvr.models.load import load_model_and_tokenizer
    from rlvr.config.model import LoraConfig, ModelConfig

    model, tok = load_model_and_tokenizer(ModelConfig(path=tiny_dir, lora=LoraConfig(r=4, alpha=8)))
    assert merge_plan(model) is not None
    from peft import LoraConfig as PeftLora, get_peft_model

    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    dora = get_peft_model(base, PeftLora(r=4, lora_alpha=8, use_dora=True, target_modules=["q_proj", "v_proj"]))
    assert merge_plan(dora) is None
    expected = copy.deepcopy(dora).merge_and_unload().state_dict()
    save_pretrained_atomic(dora, tok, tmp_path / "ckpt")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt").state_dict()
    assert all(torch.equal(loaded[k], expected[k]) for k in loaded)
