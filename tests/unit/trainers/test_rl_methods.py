"""The 2026 methods in the RL trainer: every new loss and rollout option trains end to end on the tiny model,
accumulation stays exact, and nonsensical combinations are rejected from the variant flags."""

import json

import pytest
import torch

from rlvr.config.data import BuiltinArithmetic
from rlvr.config.model import ModelConfig
from rlvr.config.rl import (
    AsymGRPOLoss,
    CISPOLoss,
    DARLoss,
    KLConfig,
    RewardTerm,
    RLStage,
    SamplingConfig,
    SAPOLoss,
    SignBalanceLoss,
    STEERLoss,
)
from rlvr.data.arithmetic import make_task
from rlvr.models.load import load_pretrained
from rlvr.rollout.collector import Rollouts
from rlvr.rollout.methods import assemble, guidance_weight, row_advantages
from rlvr.trainers.rl import build_train_batch, train_rl, update_minibatch
from rlvr.trainers.variants import check_rl_combination, rl_variant
from rlvr.verifiers.base import Verdict

NEW_LOSSES = [SignBalanceLoss(), AsymGRPOLoss(), STEERLoss(), CISPOLoss(), SAPOLoss(), DARLoss()]


def parity_judge(tasks, completions):
    return [Verdict(float(len(c) % 2 == 0), len(c) % 2 == 0, "pass" if len(c) % 2 == 0 else "wrong")
            for c in completions]


def stage(**kw):
    base = dict(data=BuiltinArithmetic(families=["add2"], n=32), sampling=SamplingConfig(group_size=4, max_new_tokens=8),
                max_steps=2, tasks_per_step=2, micro_batch_size=8, save_every=0, keep_last=1)
    base.update(kw)
    return RLStage(**base)


def fake_rollouts(rewards):
    G = len(rewards[0])
    n = len(rewards) * G
    prompt, comp = [4, 20, 21], [[30 + i % 5, 31, 1] for i in range(n)]
    return Rollouts(tasks=[None] * len(rewards), group_size=G, prompt_ids=[prompt] * n, completion_ids=comp,
                    old_logprobs=[[-1.0, -1.0, -1.0]] * n, finish_reason=["eos"] * n, texts=[""] * n,
                    rewards=torch.tensor(rewards, dtype=torch.float32), valid=torch.ones(len(rewards), G, dtype=torch.bool),
                    passed=torch.tensor(rewards) > 0, outcomes=["pass"] * n)


@pytest.mark.parametrize("loss", NEW_LOSSES, ids=lambda x: x.type)
def test_new_losses_accumulate_exactly(tiny_dir, loss):
    ro = fake_rollouts([[1, 0, 0, 1], [0, 1, 1, 1]])
    adv = rl_variant(loss).advantages(loss, ro.rewards, ro.valid)
    batch = build_train_batch(ro, adv, needs_all=rl_variant(loss).trains_zero_advantage, mask_truncated=False)
    batch.ref_logprobs = batch.old_logprobs - 0.1
    grads = []
    for micro in (2, 8):
        model, _ = load_pretrained(tiny_dir)
        update_minibatch(model, batch, stage(loss=loss, micro_batch_size=micro), on_policy=False)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
    assert float(grads[0].abs().sum()) > 0


def test_methods_compose_in_one_run(tiny_dir, tmp_path):
    # EDEN + guidance + OC-GRPO + Double-Rollout + TCR under STEER: every rollout method in one stage
    st = stage(loss=STEERLoss(tau=0.05), sampling=SamplingConfig(group_size=4, max_new_tokens=8),
               eden={"enabled": True}, guidance={"enabled": True}, off_context={"enabled": True},
               double_rollout={"enabled": True}, rewards=[RewardTerm(), RewardTerm(name="checklist", weight=0.5)])
    assert check_rl_combination(st) == []
    res = train_rl(st, ModelConfig(path=tiny_dir), tmp_path / "c", seed=1, judge=parity_judge)
    recs = [json.loads(x) for x in open(res.metrics_path)]
    assert recs[-1]["step"] == 2 and "methods/guidance_weight" in recs[-1] and "methods/eden_pass_rate" in recs[-1]


@pytest.mark.parametrize("kw", [
    {"loss": STEERLoss(tau=0.05)}, {"loss": DARLoss()}, {"loss": CISPOLoss()},
    {"eden": {"enabled": True, "fraction": 0.5}}, {"off_context": {"enabled": True}},
    {"double_rollout": {"enabled": True}}, {"guidance": {"enabled": True}},
    {"loss": AsymGRPOLoss(), "eden": {"enabled": True}},
    {"rewards": [RewardTerm(), RewardTerm(name="checklist", weight=0.5)]},
], ids=["steer", "dar", "cispo", "eden", "oc", "double", "guidance", "eden+asym", "tcr"])
def test_methods_train_end_to_end(tiny_dir, tmp_path, kw):
    res = train_rl(stage(**kw), ModelConfig(path=tiny_dir), tmp_path / "m", seed=1, judge=parity_judge)
    recs = [json.loads(x) for x in open(res.metrics_path)]
    assert recs[-1]["step"] == 2 and "rollout/zero_var_frac" in recs[-1]


def test_residual_advantage_trains_with_a_teacher(tiny_dir, tmp_path):
    st = stage(residual={"enabled": True, "teacher": tiny_dir, "weight": 1.0})
    res = train_rl(st, ModelConfig(path=tiny_dir), tmp_path / "r", seed=1, judge=parity_judge)
    assert res.checkpoint


def test_assemble_and_row_advantages():
    a, b = fake_rollouts([[1, 0], [0, 0]]), fake_rollouts([[1, 1], [1, 0]])
    b.row_extras = {"adv_weight": [0.5] * 4, "token_is": [[1.0, 2.0, 0.5]] * 4}
    ro = assemble([None, None], 2, [(a, 0), (b, 1), (a, 2), (b, 3)])
    assert ro.rewards.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    adv = torch.tensor([[1.0, -1.0], [2.0, 0.0]])
    rows = row_advantages(ro, adv)
    # row 0 plain: 1.0; row 1 from b: -1 * 0.5 * [1, 2, .5] = [-.5, -1, -.25]; row 2 plain 2.0; row 3: 0
    assert rows[0] == 1.0 and rows[1] == [-0.5, -1.0, -0.25] and rows[2] == 2.0 and rows[3] == [0.0, 0.0, 0.0]


def test_guidance_weight_decreases():
    from rlvr.config.methods import GuidanceConfig

    g = GuidanceConfig(enabled=True, weight=1.0, decay_steps=20)
    # λ(t) = 20 / (20 + t): 1, .5 at t = 20, .25 at t = 60
    assert [guidance_weight(g, t) for t in (0, 20, 60)] == [1.0, 0.5, 0.25]


def test_checklist_score_on_worked_steps():
    from rlvr.verifiers.checklist import checklist_score, step_is_true

    t = make_task("mul31", 347, 6)  # gold: 7*6=42, 4*6+4=28, 3*6+2=20. \boxed{2082}
    assert checklist_score(t, t.solution) == 1.0
    # second step wrong (4*6+4=29): 2 of 3 items
    assert checklist_score(t, "7*6=42, 4*6+4=29, 3*6+2=20. \\boxed{2092}") == pytest.approx(2 / 3)
    # right answer with no worked steps: 0 of 3 (the outcome reward pays for the answer, not the checklist)
    assert checklist_score(t, "\\boxed{2082}") == 0.0
    assert step_is_true("4*6+4=28") and not step_is_true("4*6+4=29") and not step_is_true("x=1")


@pytest.mark.parametrize("kw, key, words", [
    ({"loss": DARLoss(), "kl": KLConfig(beta=0.1)}, "kl.beta", "counts it twice"),
    ({"loss": DARLoss(), "off_context": {"enabled": True}}, "off_context.enabled", "one advantage"),
    ({"loss": {"type": "reinforce_pp", "group_baseline": False}, "eden": {"enabled": True}}, "eden.enabled",
     "no group baseline"),
    ({"sampling": SamplingConfig(group_size=2), "eden": {"enabled": True}, "guidance": {"enabled": True}},
     "sampling.group_size", "no plain sample"),
    ({"rollout": {"mode": "multi_turn"}, "data": {"type": "builtin_env", "env": "calculator"},
      "double_rollout": {"enabled": True}}, "double_rollout.enabled", "single-turn"),
])
def test_nonsensical_combinations_are_rejected(kw, key, words):
    try:
        st = stage(**kw)
    except ValueError as e:  # the config itself may already refuse it (pydantic's ValidationError is one)
        pytest.skip(f"config refuses it earlier: {e}")
    probs = check_rl_combination(st)
    assert any(k == key and words in why for k, why in probs), probs
    assert check_rl_combination(stage()) == []


@pytest.mark.parametrize("dist", [{"engine": "vllm"}, {"backend": "ray"}], ids=["vllm", "ray"])
def test_eden_needs_the_in_process_engine(dist, tmp_path):
    """EDEN's perturbed position is a forward hook on the trainer's model: vLLM and Ray rollout workers sample
    from their own copies and would never see it (the samples would silently be plain ones)."""
    from rlvr.commands.run import validate_command
    from rlvr.config.distributed import DistributedConfig
    from rlvr.errors import ConfigError

    st = stage(eden={"enabled": True})
    probs = check_rl_combination(st, DistributedConfig(**dist))
    assert any(k == "eden.enabled" and "another copy" in why for k, why in probs), probs
    assert check_rl_combination(st, DistributedConfig()) == []
    bad = tmp_path / "bad.yaml"
    sect = ", ".join(f"{k}: {v}" for k, v in dist.items())
    bad.write_text(f"name: bad\nmodel: {{tiny: {{size: test}}}}\ndistributed: {{{sect}}}\nstages:\n  - type: rl\n"
                   "    eden: {enabled: true}\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:6: stages.0.eden.enabled"):
        validate_command(str(bad), [])


def test_rlvr_validate_names_file_line_and_reason(tmp_path):
    from rlvr.commands.run import validate_command
    from rlvr.errors import ConfigError

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nmodel: {tiny: {size: test}}\nstages:\n  - type: rl\n    loss: {type: dar}\n"
                   "    kl: {beta: 0.1}\n    off_context: {enabled: true}\n")
    with pytest.raises(ConfigError) as e:
        validate_command(str(bad), [])
    msg = str(e.value)
    assert "bad.yaml:6: stages.0.kl.beta" in msg and "counts it twice" in msg
    assert "bad.yaml:7: stages.0.off_context.enabled" in msg
    good = tmp_path / "good.yaml"
    good.write_text("name: good\nmodel: {tiny: {size: test}}\nstages:\n  - type: rl\n    loss: {type: steer}\n"
                    "    eden: {enabled: true}\n")
    assert validate_command(str(good), []) == []


def test_per_token_advantages_reach_the_batch():
    ro = fake_rollouts([[1, 0]])
    # row 0: per-token [.5, 1, -1] over its 3 completion tokens; row 1: all zero -> skipped but counted
    batch = build_train_batch(ro, [[0.5, 1.0, -1.0], [0.0, 0.0, 0.0]], needs_all=False, mask_truncated=False)
    assert len(batch) == 1 and batch.num_rows == 2
    assert batch.advantages[0].tolist() == [0.0, 0.0, 0.0, 0.5, 1.0, -1.0]  # 3 prompt positions, then the completion
    assert torch.equal(batch.advantages * batch.loss_mask, torch.tensor([[0.0, 0, 0, 0.5, 1.0, -1.0]]))
    assert batch.rewards.tolist() == [1.0] and batch.group_ids.tolist() == [0]  # per row: its reward and group
