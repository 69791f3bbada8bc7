"""Per-row sampling seeds: a row's random stream depends on (step seed, row index) only.

With one generator for a whole batch, the uniforms a row sees depend on how many rows were sampled
before it, so the same step split over two rollout workers samples different completions. Here the
uniform of row ``i`` at token ``t`` is a counter-based hash of ``(row_seeds[i], t)`` (SplitMix64's
finaliser, vectorised in int64 tensor ops), so splitting a batch across workers, engines or
``batch_size`` chunks leaves every row's sample unchanged — what makes the Ray backend's per-step pass
rates equal to the single-process run's (``sampling.row_seeds``; docs/scaling.md).

Uniforms carry 24 random bits, ``u = k / 2**24`` with ``k`` in ``[0, 2**24)``: exactly representable in
float32, so ``u < 1`` always (the inverse-CDF draw in ``hf_engine._draw`` needs ``1 - u > 0``).
"""

from __future__ import annotations

import torch

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def _signed(x: int) -> int:
    """The int64 whose two's-complement bits are ``x mod 2**64``."""
    x &= _MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


def splitmix64(x: int) -> int:
    """SplitMix64's output function on a Python int (mod 2**64): the reference the tensor code follows."""
    z = (x + _GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * _M1) & _MASK64
    z = ((z ^ (z >> 27)) * _M2) & _MASK64
    return z ^ (z >> 31)


def row_seeds(seed: int, n_rows: int) -> list[int]:
    """One int64 seed per row of a generate call: ``splitmix64(seed * 2**32 + row)`` (prompt-major rows)."""
    return [_signed(splitmix64((seed << 32) + i)) for i in range(n_rows)]


def _shr(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's ``>>`` is arithmetic on negative values)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def _mix(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64's output function on int64 tensors (multiplication wraps mod 2**64)."""
    z = z + _signed(_GOLDEN)
    z = (z ^ _shr(z, 30)) * _signed(_M1)
    z = (z ^ _shr(z, 27)) * _signed(_M2)
    return z ^ _shr(z, 31)


class RowStream:
    """Uniforms for a batch of rows, one per row per call: ``next()[i] = U(row_seeds[i], t)``, t = 0, 1, ..."""

    def __init__(self, seeds: list[int], device: torch.device | str = "cpu"):
        self.seeds = torch.tensor(seeds, dtype=torch.int64, device=device)
        self.t = 0

    def next(self) -> torch.Tensor:
        """``[rows, 1]`` float32 uniforms in ``[0, 1)`` for the next token position."""
        z = _mix(self.seeds ^ _signed(splitmix64(self.t)))
        self.t += 1
        return (_shr(z, 40).to(torch.float32) * (1.0 / (1 << 24)))[:, None]


def draw_uniforms(gen, rows: int, device) -> torch.Tensor:
    """``[rows, 1]`` uniforms from a :class:`RowStream` or a ``torch.Generator`` (None: the global one)."""
    if isinstance(gen, RowStream):
        return gen.next()
    return torch.rand(rows, 1, generator=gen, device=device)
