"""``torch.optim.AdamW`` without the ``torch._dynamo`` import it costs on first use.

torch's optimizers wrap ``step``, ``zero_grad``, ``add_param_group``, ``state_dict`` and ``load_state_dict`` so that
``torch.compile`` does not trace into them (``torch._disable_dynamo``, ``_use_grad_for_differentiable``); those
wrappers import ``torch._dynamo`` when first called, and with it sympy and the symbolic-shape machinery: ~70 MB
resident in every training process, for a guard that only matters
under ``torch.compile``, which rlvr does not use. :class:`AdamW` is ``torch.optim.AdamW`` calling the same methods
unwrapped (``inspect.unwrap``: the functions the decorators wrap): the same update, bit for bit, and the same
``state_dict`` (checkpoints written by either load in the other). ``tests/unit/accel/test_adamw.py`` checks both,
and that a training step no longer imports ``torch._dynamo``. Under ``torch.compile`` use ``torch.optim.AdamW``.
"""

from __future__ import annotations

import inspect

import torch
from torch.optim import Adam, Optimizer


def _inner(fn):
    """The function under torch's wrappers (itself when unwrapped already)."""
    return inspect.unwrap(fn)


_STEP = _inner(Adam.step)


class AdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` (same arguments, update and state_dict) without its dynamo-importing wrappers."""

    add_param_group = _inner(Optimizer.add_param_group)
    zero_grad = _inner(Optimizer.zero_grad)
    state_dict = _inner(Optimizer.state_dict)
    load_state_dict = _inner(Optimizer.load_state_dict)
    _patch_step_function = _inner(Optimizer._patch_step_function)

    def step(self, closure=None):
        """AdamW's step with grad mode as torch's wrapper sets it (off unless ``differentiable``)."""
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return _STEP(self, closure)
