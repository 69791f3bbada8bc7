"""rlvr's CPU accelerations, behind the core's hooks (``rlvr.hooks``): nothing in the core imports this package.

What it holds:

* ``kernels/`` — small C kernels (plain C99, compiled by the machine's ``cc`` on first use, loaded with ctypes;
  every call through :func:`rlvr.accel.kernels.call.call`, which checks each tensor's dtype, shape, device and
  layout and keeps it alive for the call);
* ``packed_forward.py`` (+ ``packed_attention.py``, ``packed_fused.py``, ``packed_rope.py``) — the padding-free
  packed training forward for Llama/Qwen2/Mistral models (the ``forward`` hook);
* ``decode_step.py`` — FastDecoder's per-token step as one C call (the ``decode_step`` hook);
* ``llama.py`` — rlvr's own Llama-family module (``model.implementation: auto | native``; the ``causal_lm`` hook);
* ``heap.py`` — glibc heap and oneDNN cache settings between micro-batches (the ``memory`` hook, with the packed
  forward's weight reuse);
* ``adamw.py`` — ``torch.optim.AdamW`` minus its ``torch._dynamo`` import (the ``optimizer`` hook).

:func:`enable` fills the hooks; the CLI and the pipeline call it at start-up. ``RLVR_ACCEL=0`` (or ``off``) in
the environment leaves them empty: the plain PyTorch / transformers path. ``RLVR_KERNELS=0`` (alias
``RLVR_NATIVE=0``) keeps the packed forward and the own module but turns the C kernels off. Importing this
package imports neither torch nor transformers (the CLI enables it before torch loads).
"""

from __future__ import annotations

import os

from rlvr import hooks

ENV = "RLVR_ACCEL"


def requested() -> bool:
    """False when ``RLVR_ACCEL`` is ``0``, ``off``, ``false`` or ``no``."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "off", "false", "no")


class PackedForward:
    """The ``forward`` hook: :mod:`rlvr.accel.packed_forward`."""

    def supports(self, model) -> bool:
        from rlvr.accel import packed_forward

        return packed_forward.supports(model)

    def packed_states(self, model, input_ids, attention_mask, wanted=None):
        from rlvr.accel import packed_forward

        return packed_forward.packed_states(model, input_ids, attention_mask, wanted)


class KernelDecodeStep:
    """The ``decode_step`` hook: :mod:`rlvr.accel.decode_step`."""

    def reason(self, decoder) -> str | None:
        from rlvr.accel import decode_step

        return decode_step.kernel_reason(decoder)

    def bind(self, decoder):
        from rlvr.accel import decode_step

        return decode_step.KernelStep(decoder)


class HeapMemory:
    """The ``memory`` hook: :mod:`rlvr.accel.heap` and the packed forward's weight reuse."""

    def model_loaded(self, device_type: str) -> None:
        from rlvr.accel import heap

        heap.cap_ideep_cache(device_type)

    def stage_started(self, device_type: str) -> None:
        from rlvr.accel import heap

        heap.stage_memory_settings(device_type)

    def between_micro_batches(self, device_type: str) -> None:
        from rlvr.accel import heap

        heap.release_free_heap(device_type)

    def reuse_weights(self):
        from rlvr.accel import packed_fused

        return packed_fused.reuse_weights()


def make_adamw(params, **kwargs):
    """The ``optimizer`` hook: :class:`rlvr.accel.adamw.AdamW` (torch's update and state_dict)."""
    from rlvr.accel.adamw import AdamW

    return AdamW(params, **kwargs)


def load_causal_lm(path, dtype, implementation: str):
    """The ``causal_lm`` hook: :func:`rlvr.accel.llama.load`."""
    from rlvr.accel import llama

    return llama.load(path, dtype, implementation)


def enable(on: bool | None = None) -> bool:
    """Fill the core's hooks with the accelerations (``on`` None: unless ``RLVR_ACCEL=0``); ``on`` False empties
    them. Returns whether they are on. Idempotent."""
    on = requested() if on is None else on
    if not on:
        hooks.clear()
        return False
    hooks.install(__name__, forward=PackedForward(), decode_step=KernelDecodeStep(), memory=HeapMemory(),
                  optimizer=make_adamw, causal_lm=load_causal_lm)
    return True


def disable() -> None:
    """Empty the core's hooks: the plain PyTorch / transformers path."""
    hooks.clear()
