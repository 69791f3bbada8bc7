"""The benches' fixed-batch loss check (bench/_common.py): rlvr's and TRL's loss and gradient on one batch, in float32
and under bf16 autocast, each against its tolerance; and ``in_child``, which runs a check in its own process."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def common(bench_import):
    return bench_import("_common")


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


X = torch.linspace(-1.0, 1.0, 32).view(4, 8)


def _loss(model, scale: float = 1.0):
    return scale * model(X).pow(2).mean() + 1.0  # a loss above 1: the tolerance is relative


def test_the_same_loss_agrees_in_both_precisions_and_bf16_differs_from_float32(common):
    model = _model()

    def ours(bf16):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = _loss(model)
        loss.backward()
        return loss.item()

    rec = common.loss_checks(model, ours, lambda: _loss(model))
    assert rec["precision"] == "fp32" and rec["agree"] and rec["abs_diff"] == 0.0 and rec["grad_rel_diff"] == 0.0
    b = rec["bf16"]
    assert b["precision"] == "bf16" and b["agree"] and b["abs_diff"] == 0.0
    assert b["rlvr_loss"] != rec["rlvr_loss"]  # the bf16 side really ran under autocast
    assert all(p.grad is None for p in model.parameters())  # nothing left behind for the next check


def test_a_loss_off_by_a_tenth_of_a_percent_fails_float32_and_passes_bf16(common):
    model = _model()

    def ours(bf16):
        loss = _loss(model, 1.0)
        loss.backward()
        return loss.item()

    rec = common.loss_checks(model, ours, lambda: _loss(model) * 1.001)
    assert not rec["agree"] and rec["rel_diff"] == pytest.approx(1e-3, rel=1e-3)
    assert rec["bf16"]["rel_diff"] < common.LOSS_TOL["bf16"]
    wrong = common.fixed_batch_check(model, ours, lambda: _loss(model) * 1.05, bf16=True)
    assert not wrong["agree"]  # 5e-2 is outside bf16's 1e-2


def test_in_child_returns_the_result_and_reports_the_childs_error(common):
    assert common.in_child(divmod, 17, 5) == (3, 2)
    with pytest.raises(RuntimeError, match="invalid literal for int"):
        common.in_child(int, "not a number")
