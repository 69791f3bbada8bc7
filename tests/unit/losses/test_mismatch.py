"""Sampler/trainer mismatch correction: truncated IS and the geometric-mean sequence mask against numbers
worked out by hand; garbage off the mask stays out; on the fp32 CPU engine the correction is a no-op."""

import math

import pytest
import torch

from rlvr.losses.mismatch import mismatch_weights


def test_weights_and_metrics_by_hand():
    # seq 0: log rho = [ln 1.5, ln 0.5] -> rho = [1.5, 0.5], w = [1.5, 0.5];
    #        geometric mean sqrt(1.5 * 0.5) = sqrt(0.75) = 0.866 in [0.8, 1.25] -> kept
    # seq 1: log rho = [ln 3, 0] -> rho = [3, 1], w = [min(3, 2) = 2, 1];
    #        geometric mean sqrt(3) = 1.732 > 1.25 -> the whole sequence masked (weights 0)
    # the third column is padding (mask 0): it holds garbage the function must ignore
    sampler = torch.tensor([[-1.0, -1.0, float("nan")], [-2.0, -0.5, -float("inf")]])
    trainer = torch.tensor([[-1.0 + math.log(1.5), -1.0 + math.log(0.5), 5.0], [-2.0 + math.log(3.0), -0.5, 7.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    w, m = mismatch_weights(trainer, sampler, mask, tis_cap=2.0, seq_low=0.8, seq_high=1.25)
    assert torch.allclose(w, torch.tensor([[1.5, 0.5, 0.0], [0.0, 0.0, 0.0]]), atol=1e-6)
    # |diff| over the 4 masked tokens: 0.405465, 0.693147, 1.098612, 0 -> mean 0.549306, max 1.098612
    assert m["mismatch/logprob_diff_mean"] == pytest.approx(0.549306, abs=1e-5)
    assert m["mismatch/logprob_diff_max"] == pytest.approx(math.log(3.0), abs=1e-6)
    assert m["mismatch/tis_weight_mean"] == pytest.approx((1.5 + 0.5 + 2.0 + 1.0) / 4, abs=1e-6)
    assert m["mismatch/tis_truncated_frac"] == pytest.approx(0.25)
    assert m["mismatch/seq_masked_frac"] == pytest.approx(0.5)
    assert all(math.isfinite(v) for v in m.values())


def test_geometric_mean_is_length_invariant_and_empty_rows_are_not_counted():
    # the same per-token log-ratio 0.03 on 2 tokens and on 200 tokens: geometric mean exp(0.03) = 1.03045
    # for both (a product of ratios would be e^0.06 vs e^6); both outside the default [0.98, 1.02], both masked
    short, long_ = torch.zeros(1, 200), torch.zeros(1, 200)
    m_short = torch.zeros(1, 200)
    m_short[0, :2] = 1
    lp = torch.full((1, 200), 0.03)
    w1, _ = mismatch_weights(lp, short, m_short)
    w2, _ = mismatch_weights(lp, long_, torch.ones(1, 200))
    assert w1.sum() == 0 and w2.sum() == 0
    # a row with no masked token is neither masked nor counted in the masked fraction
    w, m = mismatch_weights(torch.zeros(2, 3), torch.zeros(2, 3), torch.tensor([[1, 1, 1], [0, 0, 0]]))
    assert w.tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]] and m["mismatch/seq_masked_frac"] == 0.0


def test_weights_are_detached_and_shapes_checked():
    t = torch.zeros(1, 2, requires_grad=True)
    w, _ = mismatch_weights(t, torch.zeros(1, 2), torch.ones(1, 2))
    assert not w.requires_grad
    with pytest.raises(ValueError, match="shapes differ"):
        mismatch_weights(torch.zeros(1, 2), torch.zeros(1, 3), torch.ones(1, 2))


def test_no_op_on_the_fp32_cpu_engine(tiny_dir):
    """The HF engine's sampled-token logprobs and the trainer's recomputation are the same fp32 function:
    every weight is 1 to float rounding and no sequence leaves even a band 20x narrower than the default."""
    from rlvr.data.arithmetic import generate
    from rlvr.data.chat import encode_prompt, stop_token_ids
    from rlvr.data.collate import pad_batch
    from rlvr.models.load import load_pretrained
    from rlvr.models.logprobs import token_logprobs
    from rlvr.rollout.engine import SamplingParams
    from rlvr.rollout.hf_engine import HFEngine

    model, tok = load_pretrained(tiny_dir)
    model.eval()
    prompts = [encode_prompt(tok, t) for t in generate(["add2"], 4)]
    g = HFEngine(model, tok).generate(prompts, SamplingParams(n=4, max_new_tokens=12, seed=0,
                                                              stop_token_ids=stop_token_ids(tok)))
    seqs = [p + c for p, c in zip(g.prompt_ids, g.completion_ids)]
    masks = [[0] * len(p) + [1] * len(c) for p, c in zip(g.prompt_ids, g.completion_ids)]
    ids, att, lm = pad_batch(seqs, tok.pad_token_id, masks, left=False)
    with torch.no_grad():
        trainer, _ = token_logprobs(model, ids, att)
    sampler = torch.zeros_like(trainer)
    for i, (p, lp) in enumerate(zip(g.prompt_ids, g.old_logprobs)):
        sampler[i, len(p):len(p) + len(lp)] = torch.tensor(lp)
    w, m = mismatch_weights(trainer, sampler, lm, seq_low=0.999, seq_high=1.001)
    assert m["mismatch/logprob_diff_max"] < 1e-4, m
    assert m["mismatch/seq_masked_frac"] == 0.0 and m["mismatch/tis_truncated_frac"] == 0.0
    assert torch.allclose(w[lm.bool()], torch.ones(int(lm.sum())), atol=1e-4)


def test_the_correction_does_not_change_training_on_the_cpu_engine(tiny_dir, tmp_path):
    """Two GRPO steps with the correction on (the default) and off end at the same weights (fp32 rounding)."""
    from safetensors.torch import load_file

    from rlvr.config.data import BuiltinArithmetic
    from rlvr.config.model import ModelConfig
    from rlvr.config.rl import MismatchCorrection, RewardTerm, RLStage, SamplingConfig
    from rlvr.trainers.rl import train_rl

    def run(enabled: bool, out):
        st = RLStage(data=BuiltinArithmetic(families=["add2"], n=16), sampling=SamplingConfig(group_size=4, max_new_tokens=8),
                     rewards=[RewardTerm(name="correct"), RewardTerm(name="length", weight=0.5)], max_steps=2,
                     tasks_per_step=4, save_every=0, correction=MismatchCorrection(enabled=enabled))
        res = train_rl(st, ModelConfig(path=tiny_dir), out, seed=5)
        return load_file(f"{res.checkpoint}/model.safetensors"), res

    on, res = run(True, tmp_path / "on")
    off, _ = run(False, tmp_path / "off")
    start = load_file(f"{tiny_dir}/model.safetensors")
    assert max(float((on[k] - start[k]).abs().max()) for k in on) > 1e-5  # the steps trained
    assert max(float((on[k] - off[k]).abs().max()) for k in on) < 1e-6
    import json

    rec = [json.loads(x) for x in open(res.metrics_path) if "mismatch/logprob_diff_max" in x]
    assert rec and all(r["mismatch/seq_masked_frac"] == 0 and r["mismatch/logprob_diff_max"] < 1e-4 for r in rec)
