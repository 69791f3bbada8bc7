"""Precision: trained weights are fp32 master weights (bf16 parameters under AdamW lose small updates)."""

import pytest
import torch
from pydantic import ValidationError

from rlvr.config.model import LoraConfig, ModelConfig
from rlvr.config.optim import OptimConfig
from rlvr.config.sft import SFTStage
from rlvr.data.arithmetic import generate
from rlvr.errors import ConfigError
from rlvr.models.load import load_model_and_tokenizer
from rlvr.trainers.common import build_optimizer, optimizer_step
from rlvr.trainers.sft import sft_step, tokenize_demos

LR = 1e-6


def moved_fraction(cfg: ModelConfig, steps: int = 10) -> float:
    """Fraction of the trained weights that had a gradient and changed after ``steps`` AdamW steps at lr 1e-6.

    AdamW's first steps move every weight with a gradient by about lr (|m / sqrt(v)| ~ 1): 1e-6 against
    weights of ~0.02, whose bf16 spacing is ~1.2e-4 (8 bits of mantissa) — in bf16 the update rounds away.
    """
    model, tok = load_model_and_tokenizer(cfg)
    model.train()
    examples = tokenize_demos(generate(["add2"], 8, seed=0), tok, 64)
    st = SFTStage(batch_size=8, micro_batch_size=8)
    opt, sched = build_optimizer(model, OptimConfig(lr=LR, warmup_steps=0, schedule="constant"), steps)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    before = {n: p.detach().clone() for n, p in params.items()}
    had_grad = {n: torch.zeros_like(p, dtype=torch.bool) for n, p in params.items()}
    for _ in range(steps):
        sft_step(model, examples, list(range(8)), st.micro_batch_size, st.bucketing, tok.pad_token_id, cfg.autocast_bf16)
        for n, p in params.items():
            if p.grad is not None:
                had_grad[n] |= p.grad != 0
        optimizer_step(model, opt, sched, 0.0)
    moved = sum(int(((p.detach() != before[n]) & had_grad[n]).sum()) for n, p in params.items())
    total = sum(int(h.sum()) for h in had_grad.values())
    assert total > 0
    return moved / total


def test_bf16_full_finetuning_is_refused_or_keeps_every_update(tiny_dir):
    """The configuration that loses updates (bf16 weights, full fine-tuning) is a clear error."""
    try:
        cfg = ModelConfig(path=tiny_dir, dtype="bfloat16")
        frac = moved_fraction(cfg)
    except (ValidationError, ConfigError) as e:
        assert "fp32 master weights" in str(e) and "autocast_bf16" in str(e), str(e)
        return
    assert frac > 0.95, f"only {frac:.1%} of the trained weights moved in 10 AdamW steps at lr {LR}"


@pytest.mark.parametrize("kw", [{"dtype": "float32", "autocast_bf16": True},
                                {"dtype": "bfloat16", "lora": LoraConfig(r=4, alpha=8)}],
                         ids=["fp32-weights-bf16-compute", "bf16-base-lora"])
def test_bf16_compute_keeps_fp32_master_weights_and_every_update(tiny_dir, kw):
    cfg = ModelConfig(path=tiny_dir, **kw)
    model, _ = load_model_and_tokenizer(cfg)
    assert all(p.dtype == torch.float32 for p in model.parameters() if p.requires_grad)
    assert moved_fraction(cfg) > 0.99


def test_optimizer_refuses_low_precision_trainable_weights(tiny_dir):
    model, _ = load_model_and_tokenizer(ModelConfig(path=tiny_dir))
    model.model.norm.to(torch.bfloat16)
    with pytest.raises(ConfigError, match="fp32 master weights"):
        build_optimizer(model, OptimConfig(), 10)


def test_reward_head_and_critic_train_fp32_weights_on_a_bf16_lora_base(tiny_dir, tmp_path):
    """The reward model's new head (trained in full under LoRA) and the PPO critic (trained in full) are
    fp32 master weights even when the base is bf16; their forward runs with or without autocast."""
    from rlvr.config.rlhf import PPOStage
    from rlvr.models.heads import sequence_rewards, token_values
    from rlvr.trainers.ppo import setup_models
    from rlvr.trainers.reward_model import build_reward_model

    cfg = ModelConfig(path=tiny_dir, dtype="bfloat16", lora=LoraConfig(r=4, alpha=8))
    _, rm, _ = build_reward_model(cfg, None, seed=0)
    _, _, _, critic, _, _ = setup_models(PPOStage(), cfg, tmp_path, None, seed=0)
    ids = torch.tensor([[3, 4, 5, 6]])
    for name, m in (("reward model", rm), ("critic", critic)):
        low = [n for n, p in m.named_parameters() if p.requires_grad and p.dtype != torch.float32]
        assert not low, f"{name}: {low}"
        build_optimizer(m, OptimConfig(), 10)
        for bf16 in (False, True):
            assert torch.isfinite(sequence_rewards(m, ids, torch.ones_like(ids), bf16)).all()
            assert torch.isfinite(token_values(m, ids, torch.ones_like(ids), bf16)).all()
