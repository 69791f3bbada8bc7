"""The one way Python calls a C kernel: every tensor argument checked, and kept alive, for the call.

A kernel reads raw pointers, so a tensor of the wrong dtype, shape or memory layout would be read as garbage
or written out of bounds (a segfault, or silently wrong numbers). :func:`call` takes each tensor wrapped by
:func:`arg` with what the C side assumes (its dtypes, its shape, CPU, contiguous) and raises
:class:`KernelArgumentError` naming the kernel, the argument and what was wrong before any pointer is passed.
The wrapped tensors are held in a local list until the C function returns, so a temporary (``x.contiguous()``,
``t.to(torch.long)``) cannot be freed while C reads it. Scalars and ctypes objects pass through unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FLOAT32 = (torch.float32,)
FLOAT32_OR_BF16 = (torch.float32, torch.bfloat16)
LONG = (torch.long,)
BYTE = (torch.uint8,)


class KernelArgumentError(ValueError):
    """A tensor handed to a C kernel is not what the kernel reads (dtype, shape, device or layout)."""


@dataclass(frozen=True)
class Arg:
    """A tensor argument and what the kernel assumes of it (``shape``: None, or one size per dim, None = any)."""

    tensor: torch.Tensor | None
    name: str
    dtypes: tuple
    shape: tuple | None = None
    optional: bool = False


def arg(tensor: torch.Tensor | None, name: str, dtypes: tuple = FLOAT32, shape: tuple | None = None,
        optional: bool = False) -> Arg:
    """``tensor`` as the kernel's argument ``name`` (``optional``: None is passed as a null pointer)."""
    return Arg(tensor, name, tuple(dtypes), None if shape is None else tuple(shape), optional)


def check(fn: str, a: Arg) -> None:
    """Raise :class:`KernelArgumentError` unless ``a.tensor`` is what ``fn`` reads."""
    t = a.tensor
    where = f"C kernel {fn}: argument {a.name!r}"
    if t is None:
        if not a.optional:
            raise KernelArgumentError(f"{where} is None")
        return
    if not isinstance(t, torch.Tensor):
        raise KernelArgumentError(f"{where} is a {type(t).__name__}, not a tensor")
    if t.dtype not in a.dtypes:
        raise KernelArgumentError(f"{where} has dtype {t.dtype}, expected "
                                  f"{' or '.join(str(d) for d in a.dtypes)}")
    if t.device.type != "cpu":
        raise KernelArgumentError(f"{where} is on {t.device}, expected the CPU")
    if a.shape is not None and (t.dim() != len(a.shape)
                                or any(want is not None and have != want for have, want in zip(t.shape, a.shape))):
        want = "[" + ", ".join("*" if s is None else str(s) for s in a.shape) + "]"
        raise KernelArgumentError(f"{where} has shape {list(t.shape)}, expected {want}")
    if not t.is_contiguous():
        raise KernelArgumentError(f"{where} is not contiguous (strides {t.stride()}); pass .contiguous()")


def call(lib, fn: str, *args) -> int:
    """``lib.fn(*args)`` with each :class:`Arg` checked and passed as its data pointer; returns the C status."""
    keep, raw = [], []
    for a in args:
        if isinstance(a, torch.Tensor):
            raise KernelArgumentError(f"C kernel {fn}: a bare tensor argument; wrap it with kernels.call.arg "
                                      "(name, dtypes, shape) so it is checked")
        if isinstance(a, Arg):
            check(fn, a)
            keep.append(a.tensor)
            raw.append(None if a.tensor is None else a.tensor.data_ptr())
        else:
            raw.append(a)
    rc = getattr(lib, fn)(*raw)
    del keep  # the tensors lived until here: through the whole call
    return rc
