"""LoRA on a bf16 base: a checkpoint holds W + BA merged and rounded to bf16, the live model adds BA
unmerged. The in-training evaluation (EvalHook) evaluates the merged weights and `rlvr eval` loads the
checkpoint in the run's dtype (prompt_format.json), so both give the same completion on every problem."""

import json

import torch

from rlvr.commands.evaluate import eval_command
from rlvr.config.data import BuiltinArithmetic
from rlvr.config.eval import EvalConfig
from rlvr.config.model import LoraConfig, ModelConfig
from rlvr.models.checkpoint import save_pretrained_atomic
from rlvr.models.load import load_model_and_tokenizer
from rlvr.models.prompt_format import checkpoint_format, make_format
from rlvr.monitoring.evaluate import EvalHook


def test_in_training_and_checkpoint_evaluations_agree_on_a_bf16_lora_model(tiny_dir, tmp_path):
    model, tok = load_model_and_tokenizer(ModelConfig(path=tiny_dir, dtype="bfloat16", lora=LoraConfig(r=8, alpha=16)))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # trained-looking adapters (B starts at zero)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    cfg = EvalConfig(tasks=BuiltinArithmetic(families=["add2", "mul31"], n=32, split="heldout", seed=1234),
                     max_new_tokens=16, batch_size=8)
    EvalHook(cfg, tok, every=1, out=tmp_path).run(model, 3)
    in_training = json.loads((tmp_path / "evals" / "step-000003.json").read_text())
    with checkpoint_format(make_format(dtype="bfloat16", eval_batch_size=8, eval_max_new_tokens=16)):
        save_pretrained_atomic(model, tok, tmp_path / "final")
    res = eval_command(str(tmp_path / "final"), "builtin:add2,mul31:32", 1, 1.0, 16, None, 0, quiet=True)
    assert res["prompt_format"]["dtype"] == "bfloat16"
    assert [s["completion"] for s in res["samples"]] == [s["completion"] for s in in_training["samples"]]
