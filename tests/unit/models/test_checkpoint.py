"""Step checkpoints: weights, optimiser, scheduler, RNG and trainer state round-trip; keep-last pruning;
half-written (temp) directories are never listed."""

import random

import torch

from rlvr.models.checkpoint import latest_checkpoint, list_checkpoints, load_training_state, save_training_checkpoint
from rlvr.models.tiny import build_tiny


def test_round_trip_and_pruning(tmp_path):
    model, tok = build_tiny(size="test", seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    for step in (1, 2, 3):
        model(input_ids=torch.tensor([[4, 5, 6]])).logits.sum().backward()
        opt.step(), sched.step(), opt.zero_grad()
        save_training_checkpoint(tmp_path, step, model, tok, opt, sched, {"cursor": step * 10}, keep_last=2)
    (tmp_path / ".step-000009.tmp-x").mkdir()                     # a half-written dir: never listed
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000002", "step-000003"]
    torch.manual_seed(123)
    random.seed(5)
    expect_torch, expect_py = torch.rand(1), random.random()
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    fresh, _ = build_tiny(size="test", seed=1)
    opt2 = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    sched2 = torch.optim.lr_scheduler.LambdaLR(opt2, lambda s: 1.0 / (s + 1))
    torch.manual_seed(123)
    random.seed(5)
    save_training_checkpoint(tmp_path, 4, model, tok, opt, sched, {"cursor": 40}, keep_last=0)
    st = load_training_state(latest_checkpoint(tmp_path), fresh, opt2, sched2)
    assert st["step"] == 4 and st["cursor"] == 40
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, saved[k]), k
    assert sched2.last_epoch == 3 and opt2.state_dict()["state"].keys() == opt.state_dict()["state"].keys()
    assert torch.rand(1) == expect_torch and random.random() == expect_py   # RNG restored to the save point
