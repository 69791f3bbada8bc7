"""The GRPO-family update: what skipping zero-advantage rows, the entropy bonus and the KL term do to the
gradient. Skipping rows is a speed-up only: the gradient must be the one of the whole batch."""

import json

import pytest
import torch

from rlvr.config.data import BuiltinArithmetic
from rlvr.config.optim import OptimConfig
from rlvr.config.rl import DAPOLoss, DrGRPOLoss, GRPOLoss, GSPOLoss, KLConfig, RLStage, SamplingConfig
from rlvr.data.arithmetic import generate
from rlvr.losses.aggregate import aggregate
from rlvr.losses.entropy import entropy_from_logits
from rlvr.models.load import load_pretrained
from rlvr.models.logprobs import token_logprobs
from rlvr.rollout.collector import Rollouts, collect
from rlvr.rollout.hf_engine import HFEngine
from rlvr.data.collate import pad_batch
from rlvr.trainers.common import build_optimizer
from rlvr.trainers.rl import (build_train_batch, needs_every_row, policy_update, reference_logprobs,
                              update_minibatch)
from rlvr.trainers.variants import rl_variant
from rlvr.verifiers.base import Verdict


def stage(**kw):
    return RLStage(**{"sampling": SamplingConfig(group_size=4, max_new_tokens=8), "micro_batch_size": 3, **kw})


def rollouts(rewards, lengths=None):
    """Groups of trajectories with given rewards; completions of different lengths (so token-mean and
    seq-mean differ) and sampler logprobs of -1 (so the ratio is not 1)."""
    G = len(rewards[0])
    n = len(rewards) * G
    lengths = lengths or [2 + i % 4 for i in range(n)]
    comp = [[30 + (i % G + j) % 7 for j in range(lengths[i] - 1)] + [1] for i in range(n)]
    return Rollouts(tasks=[None] * len(rewards), group_size=G, prompt_ids=[[4, 20, 21]] * n, completion_ids=comp,
                    old_logprobs=[[-1.0] * len(c) for c in comp], finish_reason=["eos"] * n, texts=[""] * n,
                    rewards=torch.tensor(rewards, dtype=torch.float32),
                    valid=torch.ones(len(rewards), G, dtype=torch.bool), passed=torch.tensor(rewards) > 0,
                    outcomes=["pass"] * n)


def grad_of(tiny_dir, ro, st, needs_all: bool):
    model, _ = load_pretrained(tiny_dir)
    adv = rl_variant(st.loss).advantages(st.loss, ro.rewards, ro.valid)
    batch = build_train_batch(ro, adv, needs_all=needs_all, mask_truncated=False)
    if st.kl.beta > 0:
        ref, _ = load_pretrained(tiny_dir)
        batch.ref_logprobs = reference_logprobs(ref, model, batch, st.sampling.temperature, st.micro_batch_size)
    update_minibatch(model, batch, st, on_policy=False)
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]), len(batch)


# half the groups have equal rewards: their rows have advantage exactly 0
MIXED = [[1, 0, 0, 1], [1, 1, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]]


@pytest.mark.parametrize("loss", [GRPOLoss(), DAPOLoss(), DrGRPOLoss()], ids=lambda x: x.aggregation)
def test_skipping_zero_advantage_rows_keeps_the_whole_batch_gradient(tiny_dir, loss):
    ro = rollouts(MIXED)
    g_all, n_all = grad_of(tiny_dir, ro, stage(loss=loss), needs_all=True)
    g_skip, n_skip = grad_of(tiny_dir, ro, stage(loss=loss), needs_all=False)
    assert (n_all, n_skip) == (16, 8)  # the skipped rows were not forwarded
    ratio = float(g_skip.norm() / g_all.norm())
    assert torch.allclose(g_skip, g_all, rtol=1e-5, atol=1e-9), f"|g_skip| / |g_all| = {ratio:.4f}"


@pytest.mark.parametrize("loss", [GRPOLoss(), DAPOLoss(), DrGRPOLoss()], ids=lambda x: x.aggregation)
def test_a_negligible_kl_does_not_rescale_the_policy_gradient(tiny_dir, loss):
    """β = 1e-12 forwards every row (KL needs them); the gradient must equal the one without KL."""
    ro = rollouts(MIXED)
    g_kl, _ = grad_of(tiny_dir, ro, stage(loss=loss, kl=KLConfig(beta=1e-12)), needs_all=True)
    g_none, _ = grad_of(tiny_dir, ro, stage(loss=loss), needs_all=False)
    ratio = float(g_kl.norm() / g_none.norm())
    assert torch.allclose(g_kl, g_none, rtol=1e-5, atol=1e-9), f"|g_kl| / |g_no_kl| = {ratio:.4f}"


def kl_grad_of(tiny_dir, ro, st):
    """The update's gradient against a reference that differs from the policy (its weights perturbed),
    with zero-advantage rows forwarded or skipped as the trainer decides (``needs_every_row``)."""
    model, _ = load_pretrained(tiny_dir)
    ref, _ = load_pretrained(tiny_dir)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    adv = rl_variant(st.loss).advantages(st.loss, ro.rewards, ro.valid)
    batch = build_train_batch(ro, adv, needs_all=needs_every_row(st, rl_variant(st.loss)), mask_truncated=False)
    batch.ref_logprobs = reference_logprobs(ref, model, batch, st.sampling.temperature, st.micro_batch_size)
    update_minibatch(model, batch, st, on_policy=False)
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]), len(batch)


def test_kl_on_trained_rows_drops_exactly_the_dead_rows_kl_gradient(tiny_dir):
    """``kl.rows: trained`` skips the zero-advantage rows (no forward) and keeps every other term as with
    ``all``: g_all = g_trained + (the KL gradient of the dead rows alone) × 8/16 (seq-mean normaliser: the
    8 dead rows of 16). And the leash still moves the weights on the trained rows."""
    beta = 0.5
    ro = rollouts(MIXED)
    g_all, n_all = kl_grad_of(tiny_dir, ro, stage(kl=KLConfig(beta=beta)))
    g_tr, n_tr = kl_grad_of(tiny_dir, ro, stage(kl=KLConfig(beta=beta, rows="trained")))
    assert (n_all, n_tr) == (16, 8)
    g_dead, n_dead = kl_grad_of(tiny_dir, rollouts([MIXED[1], MIXED[3]]), stage(kl=KLConfig(beta=beta)))
    assert n_dead == 8 and float(g_dead.abs().max()) > 0, "the dead rows' KL term gives no gradient"
    assert torch.allclose(g_all, g_tr + g_dead * 8 / 16, rtol=1e-4, atol=1e-7)
    g_pg, _ = grad_of(tiny_dir, ro, stage(), needs_all=False)
    assert float((g_tr - g_pg).norm() / g_pg.norm()) > 1e-3, "the KL term does not move the trained rows"


def test_kl_rows_decide_which_rows_are_forwarded():
    v = rl_variant(GRPOLoss())
    assert needs_every_row(stage(kl=KLConfig(beta=0.1)), v)
    assert not needs_every_row(stage(kl=KLConfig(beta=0.1, rows="trained")), v)
    assert needs_every_row(stage(kl=KLConfig(beta=0.1, rows="trained"), entropy_coef=0.01), v)
    assert not needs_every_row(stage(), v)


def test_dr_grpo_normaliser_is_constant_whatever_the_zero_variance_fraction(tiny_dir):
    """Dr.GRPO divides by (rows × max_new_tokens): adding a zero-advantage group must not change the
    gradient of the other rows except through that constant (4 more rows: 8/12 of the gradient)."""
    st = stage(loss=DrGRPOLoss())
    lengths = [2 + i % 4 for i in range(12)]
    g8, _ = grad_of(tiny_dir, rollouts(MIXED[:1] + MIXED[2:3], lengths[:8]), st, needs_all=False)
    g12, _ = grad_of(tiny_dir, rollouts(MIXED[:3], lengths[:4] + lengths[8:12] + lengths[4:8]), st, needs_all=False)
    ratio = float(g12.norm() / g8.norm())
    assert torch.allclose(g12, g8 * 8 / 12, rtol=1e-5, atol=1e-9), f"|g12| / |g8| = {ratio:.4f}, not 8/12"


def test_entropy_bonus_has_the_gradient_of_minus_coef_times_mean_entropy(tiny_dir):
    """With all advantages 0 and no KL, the loss is -c · mean entropy: its gradient is non-zero and
    equals the one computed independently from the logits (losses.entropy, seq-mean-token-mean)."""
    c = 0.1
    st = stage(entropy_coef=c)
    ro = rollouts([[0.5, 0.5, 0.5, 0.5]])
    g, n = grad_of(tiny_dir, ro, st, needs_all=True)
    assert n == 4 and float(g.abs().max()) > 0, "the entropy bonus gives no gradient"
    model, _ = load_pretrained(tiny_dir)
    seqs = [p + c_ for p, c_ in zip(ro.prompt_ids, ro.completion_ids)]
    masks = [[0] * len(p) + [1] * len(c_) for p, c_ in zip(ro.prompt_ids, ro.completion_ids)]
    ids, att, lm = pad_batch(seqs, 0, masks, left=False)
    logits = model(input_ids=ids, attention_mask=att).logits[:, :-1] / st.sampling.temperature
    ent = torch.cat([torch.zeros(len(seqs), 1), entropy_from_logits(logits)], dim=1)  # H of the dist. of token t
    (-c * aggregate(ent, lm, "seq-mean-token-mean")).backward()
    ref = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert torch.allclose(g, ref, rtol=1e-4, atol=1e-8)


def parity_judge(tasks, completions):
    return [Verdict(float(len(c) % 2 == 0), len(c) % 2 == 0, "pass" if len(c) % 2 == 0 else "wrong")
            for c in completions]


def sampled_batch(model, tok, st, bf16: bool):
    ro = collect(HFEngine(model, tok, bf16=bf16), tok, generate(["add2"], 4, seed=1), parity_judge, st.sampling,
                 st.rewards, seed=1)
    adv = rl_variant(st.loss).advantages(st.loss, ro.rewards, ro.valid)
    return build_train_batch(ro, adv, needs_all=True, mask_truncated=False)


@pytest.mark.parametrize("loss", [GRPOLoss(), GSPOLoss()], ids=["grpo", "gspo"])
def test_off_policy_updates_start_from_ratio_one_under_bf16(tiny_dir, loss):
    """μ = 2 epochs × 2 mini-batches at lr 0 (the weights never move): with old_logprobs from the training
    forward every ratio is exactly 1 and nothing is clipped, even with GSPO's 3e-4 clip and bf16; the
    sampler's bf16 logprobs differ from the trainer's, which the mismatch metrics report."""
    model, tok = load_pretrained(tiny_dir)
    st = stage(loss=loss, ppo_epochs=2, mini_batches=2, optim=OptimConfig(lr=0.0, warmup_steps=0))
    batch = sampled_batch(model, tok, st, bf16=True)
    opt, sched = build_optimizer(model, st.optim, 10)
    met = policy_update(model, opt, sched, st, batch, True)
    assert met["train/updates"] == 4
    ratios = (met["ratio/min"], met["ratio/max"], met["clip/low_frac"], met["clip/high_frac"])
    assert ratios == (pytest.approx(1.0, abs=1e-6), pytest.approx(1.0, abs=1e-6), 0.0, 0.0), ratios
    assert 0 < met["rollout/logprob_mismatch_mean"] <= met["rollout/logprob_mismatch_max"] < 0.5


def test_mismatch_metric_is_the_mean_and_max_gap_between_sampler_and_trainer(tiny_dir):
    """On-policy (μ = 1, one mini-batch) the ratio uses the forward itself; the metric compares it with
    the sampler's logprobs: here -1 on every token, so the gap is |log π(token) + 1| token by token."""
    model, _ = load_pretrained(tiny_dir)
    ro = rollouts(MIXED)
    st = stage()
    batch = build_train_batch(ro, rl_variant(st.loss).advantages(st.loss, ro.rewards, ro.valid), True, False)
    ids, att, lm = batch.input_ids, batch.attention_mask, batch.loss_mask
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, att, st.sampling.temperature)
    gap = (lp + 1).abs()[lm.bool()]
    opt, sched = build_optimizer(model, st.optim, 10)
    met = policy_update(model, opt, sched, st, batch, False)
    assert met["rollout/logprob_mismatch_mean"] == pytest.approx(float(gap.mean()), rel=1e-5)
    assert met["rollout/logprob_mismatch_max"] == pytest.approx(float(gap.max()), rel=1e-5)


@pytest.mark.parametrize("lora", [False, True], ids=["frozen-copy", "lora-base"])
def test_kl_to_the_reference_is_zero_at_the_first_step_under_bf16(tiny_dir, tmp_path, lora):
    """At step 1 the policy is the reference: the KL the loss sees is exactly 0 when both are computed in
    the same precision (bf16 autocast here)."""
    from rlvr.config.model import LoraConfig, ModelConfig
    from rlvr.trainers.rl import train_rl

    cfg = ModelConfig(path=tiny_dir, autocast_bf16=True, lora=LoraConfig(r=4, alpha=8) if lora else None)
    st = stage(kl=KLConfig(beta=0.1), max_steps=1, tasks_per_step=4, save_every=0,
               data=BuiltinArithmetic(families=["add2"], n=16))
    res = train_rl(st, cfg, tmp_path, judge=parity_judge)
    with open(res.metrics_path) as f:
        rec = [json.loads(x) for x in f][-1]
    assert rec["train/sequences"] > 0
    assert rec["kl/ref"] == 0.0, rec["kl/ref"]


def test_old_logprobs_are_recomputed_in_the_micro_batches_of_the_first_updates(tiny_dir, monkeypatch):
    """GPU kernels may round differently for different batch shapes. Emulate that with an offset that
    depends on the micro-batch's shape: the ratio is still exactly 1 on every first-epoch update only if
    the old logprobs were computed on the very micro-batches the updates use."""
    from rlvr.trainers import micro_loss as micro_loss_module
    from rlvr.trainers import update as update_module

    orig = update_module.token_logprobs

    def shape_dependent(model, ids, att, *a, **k):
        lp, ent = orig(model, ids, att, *a, **k)
        return lp + 1e-3 * ((3 * ids.shape[0] + ids.shape[1]) % 7), ent

    monkeypatch.setattr(update_module, "token_logprobs", shape_dependent)     # the old logprobs' forward
    monkeypatch.setattr(micro_loss_module, "token_logprobs", shape_dependent)  # the update's forward
    model, _ = load_pretrained(tiny_dir)
    ro = rollouts(MIXED, lengths=[2 + (5 * i) % 7 for i in range(16)])
    st = stage(loss=GSPOLoss(), mini_batches=2, micro_batch_size=3, optim=OptimConfig(lr=0.0, warmup_steps=0))
    batch = build_train_batch(ro, rl_variant(st.loss).advantages(st.loss, ro.rewards, ro.valid), False, False)
    opt, sched = build_optimizer(model, st.optim, 10)
    met = policy_update(model, opt, sched, st, batch, False, seed=0, step=0)
    assert (met["ratio/min"], met["ratio/max"]) == (pytest.approx(1.0, abs=1e-6), pytest.approx(1.0, abs=1e-6))
    assert met["clip/low_frac"] == met["clip/high_frac"] == 0.0
