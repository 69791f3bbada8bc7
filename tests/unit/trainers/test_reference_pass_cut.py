"""The reference pass's micro-batches: the first updates' own where the update's token budget does not bind or is
pinned (KL exactly 0 while the policy is the reference; a pinned recipe reproduces bit for bit), wider where the
automatic budget binds (a no-grad forward keeps no activations)."""

import pytest
import torch

from rlvr.config.rl import GRPOLoss, KLConfig, RLStage, SamplingConfig
from rlvr.data import collate
from rlvr.data.collate import micro_token_budget
from rlvr.data.order import minibatch_rows
from rlvr.losses.kl import kl_penalty
from rlvr.models.load import load_pretrained
from rlvr.rollout.collector import Rollouts
from rlvr.trainers import rl
from rlvr.trainers import update as update_module
from rlvr.trainers.update import (
    NO_GRAD_BUDGET_FACTOR,
    first_update_micros,
    no_grad_budget,
    reference_logprobs,
    reference_micros,
)


def batch_of(groups: int = 3, G: int = 4):
    """Groups sharing a 5-token prompt each, completions of 3 to 9 tokens, every advantage non-zero."""
    n = groups * G
    prompts = [[4, 20 + g, 21, 22, 23] for g in range(groups) for _ in range(G)]
    comp = [[30 + (i * 3 + j) % 11 for j in range(2 + i % 7)] + [1] for i in range(n)]
    rewards = torch.tensor([[float((g + k) % 2) for k in range(G)] for g in range(groups)])
    ro = Rollouts(tasks=[None] * groups, group_size=G, prompt_ids=prompts, completion_ids=comp,
                  old_logprobs=[[-1.0] * len(c) for c in comp], finish_reason=["eos"] * n, texts=[""] * n,
                  rewards=rewards, valid=torch.ones(groups, G, dtype=torch.bool), passed=rewards > 0,
                  outcomes=["pass"] * n)
    st = RLStage(loss=GRPOLoss(), sampling=SamplingConfig(group_size=G, max_new_tokens=12), micro_batch_size=64,
                 mini_batches=2, kl=KLConfig(beta=0.04))
    adv = rl.rl_variant(st.loss).advantages(st.loss, ro.rewards, ro.valid)
    return rl.build_train_batch(ro, adv, needs_all=True, mask_truncated=False), st


def test_the_no_grad_budget_is_the_updates_times_the_factor(tiny_dir):
    model, _ = load_pretrained(tiny_dir)
    assert no_grad_budget(model, None) is None
    assert no_grad_budget(model, 10) == 10  # pinned: every pass cut alike
    assert no_grad_budget(model, "auto") == micro_token_budget(model, "auto") * NO_GRAD_BUDGET_FACTOR


@pytest.mark.parametrize("micro_tokens", ["auto", None, 12])
def test_where_the_budget_does_not_bind_the_reference_pass_is_cut_as_the_first_updates(tiny_dir, micro_tokens):
    model, _ = load_pretrained(tiny_dir)
    batch, st = batch_of()
    first = minibatch_rows(batch.num_rows, st.mini_batches, 1, 0, 0)[0]
    assert len(first) == 2  # two mini-batches: the reference pass is cut within each, as the updates are
    assert (reference_micros(model, batch, first, st.micro_batch_size, micro_tokens)
            == first_update_micros(model, batch, first, st.micro_batch_size, micro_tokens))


def test_where_the_budget_binds_the_reference_pass_is_cut_wider_with_the_same_logprobs(tiny_dir, monkeypatch):
    """An automatic budget of 12 tokens puts (almost) each row in a micro-batch of its own for the update; the
    reference pass gets 12 × 16 = 192 padded tokens a micro-batch: the rows of a mini-batch in a few forwards,
    every row once, and logprobs equal to the row-by-row ones up to float rounding (the first step's KL ~ 0, not a bias)."""
    model, _ = load_pretrained(tiny_dir)
    ref, _ = load_pretrained(tiny_dir)
    c = model.config
    monkeypatch.setattr(collate, "MICRO_ACTIVATION_BUDGET", {"cpu": 12 * c.hidden_size * c.num_hidden_layers})
    assert micro_token_budget(model, "auto") == 12
    batch, st = batch_of()
    first = minibatch_rows(batch.num_rows, st.mini_batches, 1, 0, 0)[0]
    narrow = first_update_micros(model, batch, first, st.micro_batch_size, "auto")
    wide = reference_micros(model, batch, first, st.micro_batch_size, "auto")
    lengths = batch.lengths()
    assert len(narrow) >= len(batch) - 2 and len(wide) == 2  # a mini-batch (6 rows, <= 84 tokens) a forward
    assert sorted(i for m in wide for i in m) == list(range(len(batch)))
    assert all(len(m) * max(lengths[i] for i in m) <= 12 * NO_GRAD_BUDGET_FACTOR for m in wide)
    for rows in first:  # no micro-batch mixes the two mini-batches
        assert all(set(m) <= set(rows) or not set(m) & set(rows) for m in wide)

    seen = []
    orig = update_module.forward_logprobs
    monkeypatch.setattr(update_module, "forward_logprobs",
                        lambda m, b, t, mic, bf, micros=None, *a, **k: seen.append(micros) or orig(m, b, t, mic, bf,
                                                                                                   micros, *a, **k))
    got = rl.first_update_reference(ref, model, batch, st, False, 0, 0, micro_tokens="auto")
    assert seen == [wide]
    row_by_row = reference_logprobs(ref, model, batch, 1.0, 1, micros=narrow)
    mask = batch.loss_mask.bool()
    assert torch.allclose(got[mask], row_by_row[mask], atol=1e-5, rtol=0)
    kl = kl_penalty(got, row_by_row, "k3", loss_mask=batch.loss_mask)
    assert float(kl[mask].abs().max()) < 1e-9
