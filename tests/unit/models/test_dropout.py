"""Dropout is off in every stage unless ``model.train_dropout`` asks for it: a training-mode forward is
deterministic, so the policy's log-ratios (DPO, PPO/GRPO ratio, KL) carry no dropout noise."""

import pytest
import torch

from rlvr.config.model import LoraConfig, ModelConfig
from rlvr.config.rlhf import PPOStage
from rlvr.models.heads import token_scores
from rlvr.models.load import load_model_and_tokenizer
from rlvr.models.logprobs import token_logprobs
from rlvr.models.tiny import build_tiny
from rlvr.trainers.ppo import setup_models
from rlvr.trainers.reward_model import build_reward_model

IDS = torch.tensor([[2, 20, 21, 22, 23, 24, 25, 26, 27, 28]])


def config(tmp_path, kind: str, **kw) -> ModelConfig:
    """A model with dropout 0.1 on the LoRA adapters' input, or in the attention (model config)."""
    path = tmp_path / "m"
    build_tiny(path, size="test", seed=0, attention_dropout=0.1 if kind == "attention" else 0.0)
    lora = LoraConfig(r=4, alpha=8, dropout=0.1) if kind == "lora" else None
    return ModelConfig(path=str(path), lora=lora, **kw)


def policy(cfg: ModelConfig):
    model, _ = load_model_and_tokenizer(cfg)
    with torch.no_grad():  # LoRA's B starts at 0, which would hide the adapters' dropout
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0.0, 0.5)
    return model.train()


def two_forwards(model) -> float:
    a, _ = token_logprobs(model, IDS, torch.ones_like(IDS))
    b, _ = token_logprobs(model, IDS, torch.ones_like(IDS))
    return float((a - b).abs().max())


@pytest.mark.parametrize("kind", ["lora", "attention"])
def test_training_mode_policy_forwards_are_deterministic(tmp_path, kind):
    torch.manual_seed(0)
    gap = two_forwards(policy(config(tmp_path, kind)))
    assert gap == 0.0, f"two train-mode forwards on identical input differ by {gap:.3f} nats"


@pytest.mark.parametrize("kind", ["lora", "attention"])
def test_train_dropout_keeps_dropout_when_asked(tmp_path, kind):
    torch.manual_seed(0)
    assert two_forwards(policy(config(tmp_path, kind, train_dropout=True))) > 1e-3


@pytest.mark.parametrize("kind", ["lora", "attention"])
def test_reward_model_and_critic_forwards_are_deterministic(tmp_path, kind):
    torch.manual_seed(0)
    cfg = config(tmp_path, kind)
    _, rm, _ = build_reward_model(cfg, None, seed=0)
    _, _, _, critic, _, _ = setup_models(PPOStage(), cfg, tmp_path, None, seed=0)
    for m in (rm.train(), critic.train()):
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.05 * torch.randn_like(p))  # a non-zero head and adapters
        s1, s2 = token_scores(m, IDS, torch.ones_like(IDS)), token_scores(m, IDS, torch.ones_like(IDS))
        assert torch.equal(s1, s2), float((s1 - s2).abs().max())
