"""TrimSFT: confident tokens get no gradient but still count; the SFT stage takes the option."""

import math

import torch

from rlvr.losses.sft import sft_loss


def test_trim_sft_by_hand():
    # vocab 2, labels 0.  t0: logits [ln 19, 0] -> p = 19/20 = .95 >= τ = .9: trimmed.
    #                     t1: logits [0, 0]     -> p = .5: kept, nll = ln 2.
    # loss_sum = ln 2 (only t1), num_tokens = 2 (t0 still counted): mean loss ln2 / 2.
    logits = torch.tensor([[[math.log(19), 0.0], [0.0, 0.0]]], requires_grad=True)
    labels = torch.zeros(1, 2, dtype=torch.long)
    mask = torch.ones(1, 2)
    loss, n, met = sft_loss(logits, labels, mask, trim_confidence=0.9)
    assert math.isclose(float(loss.detach()), math.log(2), rel_tol=1e-6) and n == 2
    assert met["sft/trimmed_frac"] == 0.5
    # sft/nll still reports both tokens: (-ln .95 + ln 2) / 2
    assert math.isclose(met["sft/nll"], (-math.log(0.95) + math.log(2)) / 2, rel_tol=1e-5)
    loss.backward()
    assert torch.equal(logits.grad[0, 0], torch.zeros(2))            # trimmed: no gradient
    assert torch.allclose(logits.grad[0, 1], torch.tensor([-0.5, 0.5]))  # d(-log p0)/dz = p - e0
    # plain NLL: both tokens
    loss2, _, _ = sft_loss(logits.detach(), labels, mask)
    assert math.isclose(float(loss2), -math.log(0.95) + math.log(2), rel_tol=1e-5)


def test_sft_stage_with_trim_trains(tiny_dir, tmp_path):
    import json

    from rlvr.config.data import BuiltinArithmetic
    from rlvr.config.model import ModelConfig
    from rlvr.config.sft import SFTStage
    from rlvr.trainers.sft import train_sft

    st = SFTStage(data=BuiltinArithmetic(families=["add2"], n=16), loss={"type": "trim", "confidence": 0.5},
                  max_steps=2, batch_size=8, micro_batch_size=4, save_every=0, log_every=1)
    res = train_sft(st, ModelConfig(path=tiny_dir), tmp_path / "s", seed=0)
    recs = [json.loads(x) for x in open(res.metrics_path) if '"sft/trimmed_frac"' in x]
    assert recs and 0.0 <= recs[-1]["sft/trimmed_frac"] <= 1.0
