"""Where a speed-up plugs into the core: five small slots the core calls, empty by default.

Empty, every slot is the plain PyTorch / transformers path (the reference: what a GPU user runs). An
acceleration package fills them at start-up (``rlvr.accel.enable``, called by the pipeline and the CLI; the
core never imports it, ``tests/unit/architecture/test_layers.py`` enforces it):

* ``forward`` — the training-time forward's body: ``supports(model) -> bool`` and ``packed_states(model,
  input_ids, attention_mask, wanted) -> (hidden [M', hidden], targets [M'], where [M])`` (the final hidden
  states before ``lm_head``, ``M' >= M`` rows of which the first M are read; ``rlvr.models.logprobs`` takes it
  where ``supports`` and applies the head chunked, ``rlvr.models.lm_head``; else the HF decoder);
* ``decode_step`` — FastDecoder's per-token step: ``reason(decoder) -> str | None`` (None: it applies) and
  ``bind(decoder)`` -> an object whose ``step(decoder, ids, pos)`` returns the logits (else the PyTorch step);
* ``memory`` — ``model_loaded(device_type)``, ``stage_started(device_type)``, ``between_micro_batches(
  device_type)`` and the context manager ``reuse_weights()`` around a run of micro-batches (else no-ops);
* ``optimizer`` — the AdamW class (else ``torch.optim.AdamW``; same arguments and update);
* ``causal_lm`` — ``(path, dtype, implementation) -> model or None``: the class a checkpoint loads into
  (None: transformers' ``AutoModelForCausalLM``).

A process that starts without the CLI (a Ray worker) calls :func:`restore`: the module that filled the slots
in the parent process (``RLVR_HOOKS``, set by :func:`install`) fills them again.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from dataclasses import dataclass, fields
from typing import Any


@dataclass
class Hooks:
    """The slots (None: the plain path)."""

    forward: Any = None
    decode_step: Any = None
    memory: Any = None
    optimizer: Any = None
    causal_lm: Any = None


HOOKS = Hooks()
ENV = "RLVR_HOOKS"
"""The module whose ``enable()`` filled the slots, for child processes (:func:`restore`)."""


def install(source: str, **slots) -> None:
    """Fill the named slots (the rest keep their value); ``source``: the module doing it (``rlvr.accel``)."""
    for name, value in slots.items():
        if name not in {f.name for f in fields(Hooks)}:
            raise TypeError(f"rlvr.hooks.install: no slot {name!r}")
        setattr(HOOKS, name, value)
    os.environ[ENV] = source


def clear() -> None:
    """Empty every slot: the plain PyTorch / transformers path."""
    for f in fields(Hooks):
        setattr(HOOKS, f.name, None)
    os.environ.pop(ENV, None)


def active() -> bool:
    """Whether any slot is filled."""
    return any(getattr(HOOKS, f.name) is not None for f in fields(Hooks))


def restore() -> None:
    """In a child process: let the module named by ``RLVR_HOOKS`` fill the slots again (nothing when unset)."""
    source = os.environ.get(ENV)
    if source and not active():
        importlib.import_module(source).enable()


def packed_forward(model) -> bool:
    """Whether the training forward of ``model`` is the ``forward`` slot's packed one."""
    return HOOKS.forward is not None and HOOKS.forward.supports(model)


def reuse_weights():
    """The ``memory`` slot's context around a run of micro-batches (weights cast / stacked once), or nothing."""
    return HOOKS.memory.reuse_weights() if HOOKS.memory is not None else contextlib.nullcontext()


def between_micro_batches(device_type: str) -> None:
    """After a micro-batch's backward, before the next one's forward (the CPU heap's free pages go back)."""
    if HOOKS.memory is not None:
        HOOKS.memory.between_micro_batches(device_type)


def model_loaded(device_type: str) -> None:
    """After a stage's model is loaded, before its first matmul."""
    if HOOKS.memory is not None:
        HOOKS.memory.model_loaded(device_type)


def stage_started(device_type: str) -> None:
    """At a stage's start (its memory settings)."""
    if HOOKS.memory is not None:
        HOOKS.memory.stage_started(device_type)
