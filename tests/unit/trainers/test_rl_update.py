"""The GRPO-family update: what skipping zero-advantage rows, the entropy bonus and the KL term do to the
gradient. Skipping rows is a speed-up only: the gradient must be the one of the whole batch."""

import pytest
import torch

from rlvr.config.rl import DAPOLoss, DrGRPOLoss, GRPOLoss, KLConfig, RLStage, SamplingConfig
from rlvr.losses.aggregate import aggregate
from rlvr.losses.entropy import entropy_from_logits
from rlvr.models.load import load_pretrained
from rlvr.rollout.collector import Rollouts
from rlvr.trainers.common import pad_batch
from rlvr.trainers.rl_update import build_train_batch, compute_advantages, reference_logprobs, update_minibatch


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
    adv = compute_advantages(st.loss, ro.rewards, ro.valid)
    batch = build_train_batch(ro, adv, needs_all=needs_all, mask_truncated=False)
    if st.kl.beta > 0:
        ref, _ = load_pretrained(tiny_dir)
        batch.ref_logprobs = reference_logprobs(ref, model, batch, 0, st.sampling.temperature, st.micro_batch_size)
    update_minibatch(model, batch, st, 0, on_policy=False)
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


def test_dr_grpo_normaliser_is_constant_whatever_the_zero_variance_fraction(tiny_dir):
    """Dr.GRPO divides by (rows × max_new_tokens): adding a zero-advantage group must not change the
    gradient of the other rows except through that constant (4 more rows: 8/12 of the gradient)."""
    st = stage(loss=DrGRPOLoss())
    lengths = [2 + i % 4 for i in range(12)]
    g8, _ = grad_of(tiny_dir, rollouts(MIXED[:1] + MIXED[2:3], lengths[:8]), st, needs_all=False)
    g12, _ = grad_of(tiny_dir, rollouts(MIXED[:3], lengths[:4] + lengths[8:12] + lengths[4:8]), st, needs_all=False)
    assert torch.allclose(g12, g8 * 8 / 12, rtol=1e-5, atol=1e-9)


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
