"""rlvr.accel.adamw.AdamW is torch.optim.AdamW bit for bit (update and state_dict), without importing dynamo."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from rlvr.accel.adamw import AdamW

SRC = Path(__file__).resolve().parents[3] / "src"


def groups(m):
    return [{"params": [p for p in m.parameters() if p.ndim >= 2], "weight_decay": 0.1},
            {"params": [p for p in m.parameters() if p.ndim < 2], "weight_decay": 0.0}]


def train(m, opt, steps: int = 6):
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 3))
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(1))
    for _ in range(steps):
        m(x).pow(2).mean().backward()
        torch.nn.utils.clip_grad_norm_(list(m.parameters()), 0.5)
        opt.step()
        sched.step()
        opt.zero_grad()


def test_same_update_and_state_dict_as_torch():
    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    b = copy.deepcopy(a)
    oa = AdamW(groups(a), lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    ob = torch.optim.AdamW(groups(b), lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    train(a, oa)
    train(b, ob)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    sa, sb = oa.state_dict(), ob.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert all(torch.equal(sa["state"][i][k], sb["state"][i][k]) for i in sb["state"] for k in sb["state"][i])
    # a checkpoint of either resumes in the other, and they stay equal
    oa2, ob2 = AdamW(groups(a), lr=1e-2), torch.optim.AdamW(groups(b), lr=1e-2)
    oa2.load_state_dict(sb)
    ob2.load_state_dict(sa)
    train(a, oa2, 2)
    train(b, ob2, 2)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_steps_run_without_grad_and_move_the_weights():
    m = torch.nn.Linear(4, 2)
    before = m.weight.detach().clone()
    opt = AdamW(m.parameters(), lr=0.1)
    m(torch.ones(3, 4)).sum().backward()
    opt.step()
    assert not torch.equal(m.weight, before)
    assert m.weight.grad_fn is None and m.weight.requires_grad


def test_training_imports_no_dynamo():
    code = ("import json, sys, torch\n"
            "from rlvr.accel.adamw import AdamW\n"
            "m = torch.nn.Linear(4, 2); o = AdamW(m.parameters(), lr=0.1)\n"
            "s = torch.optim.lr_scheduler.LambdaLR(o, lambda k: 1.0)\n"
            "m(torch.ones(3, 4)).sum().backward(); torch.nn.utils.clip_grad_norm_(list(m.parameters()), 1.0)\n"
            "o.step(); s.step(); o.zero_grad(); o.load_state_dict(o.state_dict())\n"
            "print(json.dumps('torch._dynamo' in sys.modules))\n")
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) is False
