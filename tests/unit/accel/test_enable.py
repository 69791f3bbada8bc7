"""``rlvr.accel.enable()`` fills the core's hooks; off (``RLVR_ACCEL=0`` or ``disable()``), every slot is the plain
PyTorch / transformers path, and the two compute the same logprobs."""

from __future__ import annotations

import os

import pytest
import torch

from rlvr import accel, hooks
from rlvr.config.optim import OptimConfig
from rlvr.errors import ModelLoadError
from rlvr.models.load import load_pretrained
from rlvr.models.logprobs import token_logprobs
from rlvr.trainers.optimizer import build_optimizer


def test_off_is_the_plain_path_and_on_the_accelerated_one_with_the_same_logprobs(tiny_dir):
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [5, 9, 10, 11, 12, 13]])
    mask = (torch.arange(6) >= torch.tensor([[2], [0]])).long()

    accel.disable()
    assert not hooks.active()
    plain, _ = load_pretrained(tiny_dir)
    assert type(plain).__name__ == "LlamaForCausalLM" and not hooks.packed_forward(plain)
    assert type(build_optimizer(plain, OptimConfig(), 10)[0]) is torch.optim.AdamW
    with pytest.raises(ModelLoadError, match="accelerations are off"):
        load_pretrained(tiny_dir, implementation="native")
    lp_plain, _ = token_logprobs(plain, ids, mask)

    assert accel.enable(True) and hooks.active()
    fast, _ = load_pretrained(tiny_dir)
    assert type(fast).__name__ == "NativeCausalLM" and hooks.packed_forward(fast)
    opt = build_optimizer(fast, OptimConfig(), 10)[0]
    assert type(opt).__module__ == "rlvr.accel.adamw"
    lp_fast, _ = token_logprobs(fast, ids, mask)
    real = mask.bool() & (torch.arange(6) > torch.tensor([[2], [0]]))  # a real token with a real predecessor
    assert torch.allclose(lp_fast[real], lp_plain[real], atol=1e-5)


def test_rlvr_accel_0_leaves_the_hooks_empty(monkeypatch):
    monkeypatch.setenv("RLVR_ACCEL", "0")
    assert accel.enable() is False and not hooks.active()
    monkeypatch.setenv("RLVR_ACCEL", "1")
    assert accel.enable() is True and hooks.HOOKS.forward is not None


def test_a_child_process_restores_the_parents_accelerations(monkeypatch):
    accel.enable(True)
    assert os.environ[hooks.ENV] == "rlvr.accel"
    hooks.HOOKS.forward = hooks.HOOKS.decode_step = hooks.HOOKS.memory = None
    hooks.HOOKS.optimizer = hooks.HOOKS.causal_lm = None  # as in a fresh worker process
    hooks.restore()
    assert hooks.active()
