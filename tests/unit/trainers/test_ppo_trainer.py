"""PPO: KL-in-reward + GAE by hand, infra rows dropped, adaptive KL, verifier and reward-model rewards,
LoRA reference, critic initialisation, exact resume."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config.data import BuiltinArithmetic
from rlvr.config.model import LoraConfig, ModelConfig
from rlvr.config.rlhf import PPOStage
from rlvr.errors import ConfigError
from rlvr.models.checkpoint import save_pretrained_atomic
from rlvr.models.heads import sequence_classifier_from_causal
from rlvr.models.tiny import build_tiny
from rlvr.rollout.engine import Generation
from rlvr.trainers.ppo import resolve_paths, setup_models, train_ppo
from rlvr.models.heads import RM_MARKER
from rlvr.data.collate import TokenBatch
from rlvr.trainers.ppo import build_batch, compute_advantages
from rlvr.verifiers.base import Verdict

KEYS = ("reward/mean", "value/loss", "value/explained_variance", "kl/ref", "kl/coef", "clip/low_frac",
        "clip/high_frac", "policy/approx_kl", "policy/entropy", "value/clip_frac")


def even_judge(tasks, completions):
    return [Verdict(float(len(c) % 2 == 0), len(c) % 2 == 0, "pass" if len(c) % 2 == 0 else "wrong", {}, 0.0)
            for c in completions]


def stage(**kw):
    base = {"data": BuiltinArithmetic(families=["add2"], n=40), "tasks_per_step": 4, "max_steps": 2,
            "sampling": {"group_size": 1, "max_new_tokens": 6}, "mini_batches": 2, "ppo_epochs": 2,
            "micro_batch_size": 2, "kl": {"horizon": 10}}
    base.update(kw)
    return PPOStage(**base)


def records(res):
    with open(res.metrics_path) as f:
        return [json.loads(x) for x in f]


def test_kl_in_reward_and_gae_by_hand():
    # one sequence: prompt of 1 token, completion of 2 tokens; R = 1, kl_coef = 0.5
    # k1 per token = old - ref = [1, 0] -> token rewards [-0.5, 0 + 1] = [-0.5, 1]
    # values 0, gamma = lam = 1 -> advantages = returns = reward-to-go = [0.5, 1]
    b = TokenBatch(torch.tensor([[3, 4, 5]]), torch.ones(1, 3, dtype=torch.long), torch.tensor([[0.0, 1.0, 1.0]]),
                   old_logprobs=torch.tensor([[0.0, -1.0, -1.0]]), ref_logprobs=torch.tensor([[0.0, -2.0, -1.0]]),
                   values=torch.zeros(1, 3), rewards=torch.tensor([1.0]))
    met = compute_advantages(b, kl_coef=0.5, gamma=1.0, lam=1.0, whiten_adv=False)
    assert torch.allclose(b.advantages, torch.tensor([[0.0, 0.5, 1.0]]))
    assert torch.allclose(b.returns, torch.tensor([[0.0, 0.5, 1.0]]))
    assert met["kl/ref"] == pytest.approx(1.0) and met["reward/with_kl_mean"] == pytest.approx(0.5)
    compute_advantages(b, 0.5, 1.0, 1.0, whiten_adv=True)                  # [0.5, 1] -> [-1, 1]
    assert torch.allclose(b.advantages, torch.tensor([[0.0, -1.0, 1.0]]), atol=1e-4)


def test_build_batch_drops_infra_and_empty_rows():
    gen = Generation([[1, 2], [1, 3], [1, 4]], [[5, 6], [], [7]], [[-1.0, -1.0], [], [-1.0]], ["eos"] * 3,
                     ["a", "", "b"], [0, 1, 2])
    b, keep = build_batch(gen, torch.tensor([1.0, 0.0, 0.5]), torch.tensor([True, True, False]), 0)
    assert keep == [0] and b.input_ids.tolist() == [[1, 2, 5, 6]] and b.loss_mask.tolist() == [[0, 0, 1, 1]]


def test_ppo_with_the_verifier_logs_the_ppo_metrics_and_adapts_kl(tiny_dir, tmp_path):
    res = train_ppo(stage(kl={"target": 1e-9, "horizon": 10}), ModelConfig(path=tiny_dir), tmp_path, init_path=tiny_dir,
                    judge=even_judge)
    recs = records(res)
    assert recs[0]["event"] == "start" and recs[0]["reference"] == "frozen copy"
    steps = [r for r in recs if r["step"] > 0]
    for k in KEYS:
        assert all(k in r and isinstance(r[k], (int, float)) and math.isfinite(r[k]) for r in steps), k
    # adaptive KL: step 1 has KL 0 (policy == reference) -> error clipped to -0.2 -> 0.05 * (1 - 0.2 * 4 / 10)
    assert steps[1]["kl/coef"] == pytest.approx(0.05 * (1 - 0.2 * 4 / 10))
    assert res.extra["kl_coef"] != 0.05 and (tmp_path / "ppo" / "critic" / "config.json").exists()
    assert steps[0]["train/updates"] == 4          # 2 epochs x 2 mini-batches


def test_verifier_critic_starts_at_zero_value_and_reference_is_a_frozen_copy(tiny_dir, tmp_path):
    policy, tok, ref, critic, rm, _ = setup_models(stage(), ModelConfig(path=tiny_dir), tmp_path, tiny_dir, 0)
    assert rm is None and torch.count_nonzero(critic.score.weight) == 0
    assert not any(p.requires_grad for p in ref.parameters()) and ref is not policy
    assert torch.equal(critic.model.embed_tokens.weight, policy.model.embed_tokens.weight)


def test_ppo_with_a_reward_model_starts_the_critic_from_it(tiny_dir, tmp_path):
    model, tok = build_tiny(size="test", seed=0)
    rm_dir = save_pretrained_atomic(sequence_classifier_from_causal(model, tok, seed=5), tok, tmp_path / "rm")
    (rm_dir / RM_MARKER).write_text(json.dumps({"policy": tiny_dir}))
    # given the reward model folder as init_path (what a pipeline passes), the policy is the one it started from
    st = stage(reward="reward_model", max_steps=1)
    assert resolve_paths(st, tmp_path, str(rm_dir)) == (tiny_dir, str(rm_dir))
    _, _, _, critic, rm, _ = setup_models(st, ModelConfig(path=tiny_dir), tmp_path, str(rm_dir), 0)
    assert torch.equal(critic.score.weight, rm.score.weight) and critic is not rm
    res = train_ppo(st, ModelConfig(path=tiny_dir), tmp_path, init_path=str(rm_dir), judge=even_judge)
    last = records(res)[-1]
    assert all(k in last for k in KEYS) and "rollout/pass_rate" in last          # verifier still monitored
    with pytest.raises(ConfigError, match="no reward model at"):
        resolve_paths(stage(reward="reward_model"), tmp_path / "elsewhere", tiny_dir)


def test_lora_policy_uses_the_base_as_reference(tiny_dir, tmp_path):
    cfg = ModelConfig(path=tiny_dir, lora=LoraConfig(r=4, alpha=8, target_modules=["q_proj", "v_proj"]))
    res = train_ppo(stage(max_steps=1), cfg, tmp_path, init_path=tiny_dir, judge=even_judge)
    rec = records(res)
    assert rec[0]["reference"] == "base (adapters disabled)" and rec[-1]["kl/ref"] == pytest.approx(0.0, abs=1e-6)


def test_resume_matches_uninterrupted(tiny_dir, tmp_path):
    st = stage(max_steps=4, save_every=2)
    full = train_ppo(st, ModelConfig(path=tiny_dir), tmp_path / "full", init_path=tiny_dir, judge=even_judge)
    with pytest.raises(KeyboardInterrupt):
        train_ppo(st, ModelConfig(path=tiny_dir), tmp_path / "cut", init_path=tiny_dir, judge=even_judge,
                  crash_at_step=3)
    res = train_ppo(st, ModelConfig(path=tiny_dir), tmp_path / "cut", init_path=tiny_dir, judge=even_judge,
                    resume=True)
    for name in ("final", "critic"):
        a = load_file(str(tmp_path / "full" / "ppo" / name / "model.safetensors"))
        b = load_file(str(tmp_path / "cut" / "ppo" / name / "model.safetensors"))
        assert all(torch.allclose(a[k], b[k], atol=1e-6, rtol=0) for k in a), name
    assert res.extra["kl_coef"] == pytest.approx(full.extra["kl_coef"])


def test_ppo_with_a_reward_model_wider_than_the_policy(tiny_dir, tmp_path):
    # an RM built on a larger backbone (reward_model.backbone): the critic is a copy of it, the actor stays small
    model, tok = build_tiny(size="test", seed=1, hidden_size=96)
    rm_dir = save_pretrained_atomic(sequence_classifier_from_causal(model, tok, seed=5), tok, tmp_path / "rm")
    (rm_dir / RM_MARKER).write_text(json.dumps({"policy": tiny_dir}))
    st = stage(reward="reward_model", max_steps=2)
    policy, _, _, critic, rm, _ = setup_models(st, ModelConfig(path=tiny_dir), tmp_path, str(rm_dir), 0)
    assert critic.config.hidden_size == 96 and policy.config.hidden_size == 64
    res = train_ppo(st, ModelConfig(path=tiny_dir), tmp_path, init_path=str(rm_dir), judge=even_judge)
    last = records(res)[-1]
    assert res.steps == 2 and all(k in last for k in KEYS) and torch.isfinite(torch.tensor(last["value/loss"]))


def test_ppo_logs_the_sampler_trainer_logprob_mismatch(tiny_dir, tmp_path):
    """PPO's old logprobs come from the training forward; the gap to the sampler's is logged (fp32: ~0)."""
    res = train_ppo(stage(max_steps=1), ModelConfig(path=tiny_dir), tmp_path, judge=even_judge)
    last = records(res)[-1]
    assert 0 <= last["rollout/logprob_mismatch_mean"] <= last["rollout/logprob_mismatch_max"] < 1e-4
    for k in ("time/rollout", "time/generate", "time/verify", "time/ref", "time/advantages", "time/train"):
        assert last[k] >= 0, k  # the step's phases, named and timed as in the RL stage


def test_ppo_old_logprobs_and_values_come_from_the_first_updates_micro_batches(tiny_dir, tmp_path, monkeypatch):
    """GPU kernels may round differently for different batch shapes. Emulate that with an offset that depends on
    the micro-batch's shape (policy logprobs and critic values): at lr 0 every ratio is exactly 1 and no value
    is clipped on every first-epoch update only if π_old and V_old were computed on the very micro-batches the
    updates use (the RL stage's plan, ``trainers/update.py``)."""
    from rlvr.config.optim import OptimConfig
    from rlvr.trainers import micro_loss as micro_loss_module
    from rlvr.trainers import ppo as ppo_module
    from rlvr.trainers import update as update_module

    orig_lp, orig_v = update_module.token_logprobs, ppo_module.token_values
    offset = lambda ids: 1e-3 * ((3 * ids.shape[0] + ids.shape[1]) % 7)  # noqa: E731

    def shape_dependent_lp(model, ids, att, *a, **k):
        lp, ent = orig_lp(model, ids, att, *a, **k)
        return lp + offset(ids), ent

    def shape_dependent_v(critic, ids, att, *a, **k):
        return orig_v(critic, ids, att, *a, **k) + offset(ids)

    for module in (update_module, micro_loss_module):
        monkeypatch.setattr(module, "token_logprobs", shape_dependent_lp)
    for module in (ppo_module, micro_loss_module):
        monkeypatch.setattr(module, "token_values", shape_dependent_v)
    st = stage(tasks_per_step=8, max_steps=1, mini_batches=2, ppo_epochs=1, micro_batch_size=3, value_clip=1e-6,
               optim=OptimConfig(lr=0.0, warmup_steps=0), sampling={"group_size": 1, "max_new_tokens": 8})
    last = records(train_ppo(st, ModelConfig(path=tiny_dir), tmp_path, judge=even_judge))[-1]
    assert last["train/updates"] == 2
    assert (last["ratio/min"], last["ratio/max"]) == (pytest.approx(1.0, abs=1e-6), pytest.approx(1.0, abs=1e-6))
    assert last["clip/low_frac"] == last["clip/high_frac"] == last["value/clip_frac"] == 0.0
