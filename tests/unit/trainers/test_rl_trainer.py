"""GRPO-family trainer: zero-variance groups cost nothing, accumulation is exact, resume is exact."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config.data import BuiltinArithmetic
from rlvr.config.model import ModelConfig
from rlvr.config.rl import DAPOLoss, GRPOLoss, GSPOLoss, KLConfig, RLStage, SamplingConfig
from rlvr.models.load import load_pretrained
from rlvr.rollout.collector import Rollouts
from rlvr.trainers.rl import build_train_batch, policy_update, train_rl, update_minibatch
from rlvr.trainers.variants import rl_variant
from rlvr.verifiers.base import Verdict


def parity_judge(tasks, completions):
    """A deterministic stand-in verifier: passes completions of even character length."""
    return [Verdict(float(len(c) % 2 == 0), len(c) % 2 == 0, "pass" if len(c) % 2 == 0 else "wrong")
            for c in completions]


def stage(**kw):
    base = dict(data=BuiltinArithmetic(families=["add2"], n=32), sampling=SamplingConfig(group_size=4, max_new_tokens=8),
                max_steps=4, tasks_per_step=4, micro_batch_size=8, save_every=2, keep_last=1)
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


def test_all_equal_groups_train_nothing_and_move_no_weight(tiny_dir):
    model, _ = load_pretrained(tiny_dir)
    ro = fake_rollouts([[1, 1, 1, 1], [0, 0, 0, 0]])
    adv = rl_variant(GRPOLoss()).advantages(GRPOLoss(), ro.rewards, ro.valid)
    assert torch.equal(adv, torch.zeros(2, 4))
    batch = build_train_batch(ro, adv, needs_all=False, mask_truncated=False)
    assert len(batch) == 0  # no forward/backward is spent on them
    before = [p.detach().clone() for p in model.parameters()]
    st = stage()
    from rlvr.trainers.common import build_optimizer

    opt, sched = build_optimizer(model, st.optim, 10)
    met = policy_update(model, opt, sched, st, batch, False)
    assert met["train/sequences"] == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_zero_advantage_rows_give_exactly_zero_gradient_when_kept(tiny_dir):
    model, _ = load_pretrained(tiny_dir)
    ro = fake_rollouts([[0.5, 0.5, 0.5, 0.5]])
    adv = rl_variant(GRPOLoss()).advantages(GRPOLoss(), ro.rewards, ro.valid)
    batch = build_train_batch(ro, adv, needs_all=True, mask_truncated=False)  # kept, as KL would need them
    assert len(batch) == 4
    update_minibatch(model, batch, stage(), on_policy=True)
    assert all(p.grad is None or torch.count_nonzero(p.grad) == 0 for p in model.parameters())


@pytest.mark.parametrize("loss", [GRPOLoss(), DAPOLoss(), GSPOLoss(), GRPOLoss(aggregation="seq-mean-token-sum-norm")])
def test_accumulation_4x2_equals_2x4(tiny_dir, loss):
    ro = fake_rollouts([[1, 0, 0, 1], [0, 1, 1, 1]])
    adv = rl_variant(loss).advantages(loss, ro.rewards, ro.valid)
    batch = build_train_batch(ro, adv, needs_all=False, mask_truncated=False)
    grads = []
    for micro in (2, 4, 8):
        model, _ = load_pretrained(tiny_dir)
        update_minibatch(model, batch, stage(loss=loss, micro_batch_size=micro), on_policy=False)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6) and torch.allclose(grads[1], grads[2], atol=1e-6)


def test_rl_resume_equals_uninterrupted(tiny_dir, tmp_path):
    cfg = ModelConfig(path=tiny_dir)
    a = train_rl(stage(), cfg, tmp_path / "a", seed=3, judge=parity_judge)
    with pytest.raises(KeyboardInterrupt):
        train_rl(stage(), cfg, tmp_path / "b", seed=3, judge=parity_judge, crash_at_step=3)
    b = train_rl(stage(), cfg, tmp_path / "b", seed=3, judge=parity_judge, resume=True)
    wa, wb = load_file(f"{a.checkpoint}/model.safetensors"), load_file(f"{b.checkpoint}/model.safetensors")
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-6, rtol=0), k
    recs = [json.loads(x) for x in open(a.metrics_path)]
    for key in ("rollout/pass_rate", "rollout/zero_var_frac", "policy/entropy", "rollout/length_mean",
                "rollout/truncation_rate", "time/generate", "time/verify", "time/train"):
        assert key in recs[-1], key


def test_kl_with_reference_runs_and_is_logged(tiny_dir, tmp_path):
    res = train_rl(stage(max_steps=2, kl=KLConfig(beta=0.1)), ModelConfig(path=tiny_dir), tmp_path / "k",
                   judge=parity_judge)
    recs = [json.loads(x) for x in open(res.metrics_path)]
    assert any("kl/ref" in r for r in recs)
    steps = [r for r in recs if r.get("step", 0) > 0 and "train/loss" in r]
    for k in ("time/rollout", "time/generate", "time/verify", "time/advantages", "time/ref", "time/train"):
        assert all(r[k] >= 0 for r in steps), k  # every phase of the step named and timed


def test_dynamic_sampling_reports_data_too_easy(tiny_dir, tmp_path):
    always = lambda tasks, comps: [Verdict(1.0, True, "pass") for _ in comps]  # noqa: E731
    res = train_rl(stage(max_steps=1, loss=DAPOLoss(),
                         sampling=SamplingConfig(group_size=4, max_new_tokens=8, max_resample_rounds=1)), ModelConfig(path=tiny_dir),
                   tmp_path / "d", judge=always)
    rec = [json.loads(x) for x in open(res.metrics_path)][-1]
    assert rec["train/sequences"] == 0 and "too easy" in rec["notes"]
    assert rec["rollout/groups_drawn"] == 8  # the first draw and one resample round of 4 tasks each


def test_lora_reference_is_the_base_with_adapters_disabled_and_resume_is_exact(tiny_dir, tmp_path):
    from rlvr.config.model import LoraConfig

    cfg = ModelConfig(path=tiny_dir, lora=LoraConfig(r=4, alpha=8))
    st = stage(kl=KLConfig(beta=0.05))
    a = train_rl(st, cfg, tmp_path / "a", seed=3, judge=parity_judge)
    recs = [json.loads(x) for x in open(a.metrics_path)]
    assert any(r.get("kl/ref", 0) > 0 for r in recs)  # adapters moved the policy away from the base
    with pytest.raises(KeyboardInterrupt):
        train_rl(st, cfg, tmp_path / "b", seed=3, judge=parity_judge, crash_at_step=3)
    b = train_rl(st, cfg, tmp_path / "b", seed=3, judge=parity_judge, resume=True)
    wa, wb = load_file(f"{a.checkpoint}/model.safetensors"), load_file(f"{b.checkpoint}/model.safetensors")
    assert not any("lora" in k for k in wa)  # the final model is merged: a plain HF checkpoint
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-6, rtol=0), k


def test_prompts_that_do_not_fit_the_model_are_refused_before_any_rollout(tmp_path):
    """A prompt + max_new_tokens beyond the model's positions: a DataError naming the task, the lengths and
    the fix, raised when the stage opens (nothing generated, no checkpoint written)."""
    from rlvr.config.data import JsonlTasks
    from rlvr.errors import DataError
    from rlvr.models.tiny import build_tiny

    model_dir = tmp_path / "short"
    build_tiny(model_dir, size="test", seed=0, max_position_embeddings=40)
    data = tmp_path / "tasks.jsonl"
    rows = [{"id": "short", "prompt": "1+1=", "answer": "2"},
            {"id": "long", "prompt": "1+" * 20 + "1=", "answer": "21"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    st = stage(data=JsonlTasks(path=str(data)), sampling=SamplingConfig(group_size=2, max_new_tokens=16))
    with pytest.raises(DataError, match=r"1 of 2 prompts.*40 positions.*task 'long'.*max_new_tokens"):
        train_rl(st, ModelConfig(path=str(model_dir)), tmp_path / "run", judge=parity_judge)
    assert not (tmp_path / "run" / st.name / "checkpoints").exists()


def test_asynchronous_rollouts_train_on_prefetched_batches(tiny_dir, tmp_path):
    """``max_staleness`` 1 picks the asynchronous source: each next batch is sampled on a background thread by an
    engine holding its own copy of the weights (as Ray workers or vLLM do), tagged with their version, while the
    current one trains. The copy takes version v only once batch v was drawn (so every batch after the first is
    one step stale, whatever the threads' timing)."""
    import copy
    import threading

    from rlvr.rollout.hf_engine import HFEngine
    from rlvr.trainers.parallel import DistContext

    class CopyEngine:
        def __init__(self, model, tok):
            self.inner, self.version, self.calls = HFEngine(copy.deepcopy(model), tok), 0, 0
            self.cond = threading.Condition()

        def generate(self, prompts, params):
            with self.cond:  # no weight update while sampling
                self.calls += 1
                self.cond.notify_all()
                gen = self.inner.generate(prompts, params)
                gen.policy_version = [self.version] * len(gen.completion_ids)
                return gen

        def sync_weights(self, model):
            pass

    class Prefetching(DistContext):
        max_staleness = 1

        def engine(self, model, tok, bf16=False):
            self.copy = CopyEngine(model, tok)
            return self.copy

        def publish(self, model, version):
            with self.copy.cond:
                assert self.copy.cond.wait_for(lambda: version == 0 or self.copy.calls > version, timeout=120)
                self.copy.inner.model.load_state_dict(model.state_dict())
                self.copy.version = version

    res = train_rl(stage(max_steps=3, mini_batches=2), ModelConfig(path=tiny_dir), tmp_path, judge=parity_judge,
                   dist=Prefetching())
    steps = [r for r in map(json.loads, open(res.metrics_path)) if "rollout/staleness" in r]
    assert [(r["step"], r["rollout/staleness"], r["rollout/stale_dropped"]) for r in steps] == \
        [(1, 0, 0), (2, 1, 0), (3, 1, 0)]
    assert all(r["train/sequences"] > 0 and math.isfinite(r["train/loss"]) for r in steps if r.get("train/updates"))
