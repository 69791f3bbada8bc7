"""The sampler/trainer mismatch correction on every update path: off-policy (several mini-batches, several
epochs) it compares the trainer's recomputed π_old with the engine's logprobs, not π_old with itself; the
default sequence band masks a row off by 0.08 nats a token but not the gap of the precisions the defaults run
in; a step that masks more than 5% of its sequences says so; top-p sampling leaves the statistics as at top-p 1."""

import logging

import pytest
import torch

from rlvr.config.optim import OptimConfig
from rlvr.config.rl import MismatchCorrection, RLStage, SamplingConfig
from rlvr.data.arithmetic import generate
from rlvr.losses.mismatch import SEQ_HIGH, SEQ_LOW
from rlvr.models.load import load_pretrained
from rlvr.rollout.collector import Rollouts, collect
from rlvr.rollout.hf_engine import HFEngine
from rlvr.trainers.common import build_optimizer
from rlvr.trainers.rl import build_train_batch, forward_logprobs, policy_update
from rlvr.trainers.variants import rl_variant
from rlvr.verifiers.base import Verdict

SHIFT = 0.08  # nats a token: top-p 0.9's -log Z at T 1, ~70x the bf16 gap the correction is built for


def stage(**kw):
    return RLStage(**{"sampling": SamplingConfig(group_size=4, max_new_tokens=8), "micro_batch_size": 3,
                      "optim": OptimConfig(lr=0.0, warmup_steps=0), **kw})


def parity_judge(tasks, completions):
    return [Verdict(float(len(c) % 2 == 0), len(c) % 2 == 0, "pass" if len(c) % 2 == 0 else "wrong")
            for c in completions]


def shifted_batch(model, st, shifts: dict[int, float]):
    """16 rows (4 groups of 4, mixed rewards) whose 'engine' logprobs are the trainer's own fp32 ones, row i
    shifted by ``shifts[i]`` nats on every token."""
    G, n = 4, 16
    comp = [[30 + (i % G + j) % 7 for j in range(1 + i % 5)] + [1] for i in range(n)]
    rewards = torch.tensor([[1, 0, 0, 1], [1, 1, 0, 1], [0, 1, 0, 0], [0, 0, 1, 1]], dtype=torch.float32)
    ro = Rollouts(tasks=[None] * 4, group_size=G, prompt_ids=[[4, 20, 21]] * n, completion_ids=comp,
                  old_logprobs=[[0.0] * len(c) for c in comp], finish_reason=["eos"] * n, texts=[""] * n,
                  rewards=rewards, valid=torch.ones(4, G, dtype=torch.bool), passed=rewards > 0,
                  outcomes=["pass"] * n)
    batch = build_train_batch(ro, rl_variant(st.loss).advantages(st.loss, ro.rewards, ro.valid), True, False)
    assert len(batch) == n
    lps = forward_logprobs(model, batch, st.sampling.temperature, st.micro_batch_size, False)
    shift = torch.tensor([shifts.get(i, 0.0) for i in range(n)]).unsqueeze(1)
    batch.old_logprobs = (lps + shift) * batch.loss_mask
    return batch


def update(model, st, batch, bf16=False):
    opt, sched = build_optimizer(model, st.optim, 10)
    return policy_update(model, opt, sched, st, batch, bf16, seed=0, step=0)


@pytest.mark.parametrize("mini,epochs", [(1, 1), (2, 1), (4, 2)])
def test_the_correction_compares_the_trainer_with_the_sampler_on_every_path(tiny_dir, mini, epochs):
    """Rows 0 and 5 are off by ±0.08 nats a token: masked (2 of 16) whether the update is on-policy or not, and
    the metrics are the same on every path (the off-policy path once compared π_old with itself: all zero)."""
    model, _ = load_pretrained(tiny_dir)
    st = stage(mini_batches=mini, ppo_epochs=epochs)
    batch = shifted_batch(model, st, {0: SHIFT, 5: -SHIFT})
    toks = batch.loss_mask.sum(dim=1).tolist()
    met = update(model, st, batch)
    assert met["mismatch/seq_masked_frac"] == pytest.approx(2 / 16)
    assert met["mismatch/logprob_diff_mean"] == pytest.approx(SHIFT * (toks[0] + toks[5]) / sum(toks), abs=1e-5)
    assert met["mismatch/logprob_diff_max"] == pytest.approx(SHIFT, abs=1e-5)
    assert met["ratio/min"] == pytest.approx(1.0, abs=1e-6) and met["ratio/max"] == pytest.approx(1.0, abs=1e-6)


BF16_GAP = 1.34e-2
"""The largest |mean log ρ| of a sequence measured between a bf16 and a float32 forward (either way round) on the
quickstart's 1m model after SFT, 512 sequences of 48 tokens at most (bench/mismatch_band.py; p99 7.8e-3)."""


def test_default_band_masks_a_row_off_by_008_nats_a_token_and_keeps_the_bf16_gap(tiny_dir):
    assert (MismatchCorrection().seq_low, MismatchCorrection().seq_high) == (SEQ_LOW, SEQ_HIGH)
    model, _ = load_pretrained(tiny_dir)
    st = stage()
    for shift in (SHIFT, -SHIFT, SHIFT / 2, -SHIFT / 2):  # half of it too: a real mismatch is not rounding
        met = update(model, st, shifted_batch(model, st, {3: shift}))
        assert met["mismatch/seq_masked_frac"] == pytest.approx(1 / 16), shift
    met = update(model, st, shifted_batch(model, st, {2: BF16_GAP, 7: -BF16_GAP}))
    assert met["mismatch/seq_masked_frac"] == 0.0


@pytest.mark.parametrize("decode_bf16,train_bf16", [(False, True), (True, True)])
def test_default_band_keeps_the_gap_of_the_default_precisions(tiny_dir, decode_bf16, train_bf16):
    """The precisions the defaults run in (``autocast_bf16``: ``auto`` on a CPU with bf16 units trains in bf16 and
    decodes in float32 below 3M parameters, both in bf16 above; ``true`` on a GPU): the default band masks no
    sequence of a sampled batch, and no warning fires."""
    model, tok = load_pretrained(tiny_dir)
    st = stage(sampling=SamplingConfig(group_size=8, max_new_tokens=16))
    ro = collect(HFEngine(model, tok, bf16=decode_bf16), tok, generate(["add2", "mul31"], 6, seed=3), parity_judge,
                 st.sampling, st.rewards, seed=3)
    batch = build_train_batch(ro, rl_variant(st.loss).advantages(st.loss, ro.rewards, ro.valid), True, False)
    met = update(model, st, batch, bf16=train_bf16)
    if decode_bf16 != train_bf16:
        assert met["mismatch/logprob_diff_mean"] > 1e-4  # the gap is there ...
    assert met["mismatch/seq_masked_frac"] == 0.0, met  # ... and the band lets it through


def test_a_step_masking_more_than_5_percent_warns(tiny_dir, caplog):
    model, _ = load_pretrained(tiny_dir)
    st = stage(mini_batches=2)
    with caplog.at_level(logging.WARNING, logger="rlvr.trainers.rl"):
        update(model, st, shifted_batch(model, st, {}))
        assert not caplog.records
        update(model, st, shifted_batch(model, st, {0: SHIFT, 9: SHIFT}))  # 2 of 16: 12.5%
    assert len(caplog.records) == 1 and "masked 12.5%" in caplog.records[0].getMessage()


@pytest.mark.parametrize("mini", [1, 2])
def test_top_p_leaves_the_on_policy_mismatch_statistics_as_at_top_p_1(tiny_dir, mini):
    """Top-p 0.9 shifts every recorded logprob by -log Z (the renormalised nucleus); the trainer computes its
    ratio, π_old and the correction under the same nucleus, so the statistics stay those of top-p 1: float
    rounding, nothing masked, every ratio 1."""
    model, tok = load_pretrained(tiny_dir)
    res = {}
    for top_p in (1.0, 0.9):
        st = stage(sampling=SamplingConfig(group_size=8, max_new_tokens=16, top_p=top_p), mini_batches=mini)
        ro = collect(HFEngine(model, tok), tok, generate(["add2"], 4, seed=2), parity_judge, st.sampling, st.rewards,
                     seed=2)
        batch = build_train_batch(ro, rl_variant(st.loss).advantages(st.loss, ro.rewards, ro.valid), True, False)
        res[top_p] = update(model, st, batch)
    for met in res.values():
        assert met["mismatch/logprob_diff_mean"] < 1e-5 and met["mismatch/logprob_diff_max"] < 1e-4, met
        assert met["mismatch/seq_masked_frac"] == 0.0 and met["mismatch/tis_weight_mean"] == pytest.approx(1, abs=1e-5)
        assert met["ratio/min"] == pytest.approx(1.0, abs=1e-6) and met["ratio/max"] == pytest.approx(1.0, abs=1e-6)
