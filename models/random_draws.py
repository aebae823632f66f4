"""Counter-based random draws on the device, shared by the model families.

Row r's ``d``-th draw over vocabulary id v is ``hash(key_r, d, v)``: a context
keyed by its seed draws the same ids whatever else shares its batch, and the
noise of a whole batch is one elementwise computation (for Gumbel-max sampling).
"""

from __future__ import annotations

import torch

_M32 = 0xFFFFFFFF
_MIX = 0x45D9F3B  # < 2**31: products of 32-bit values stay inside int64
_GOLDEN = 0x9E3779B9


def hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash of int64 values in [0, 2**32)."""
    x = x & _M32
    x = ((x >> 16) ^ x) * _MIX & _M32
    x = ((x >> 16) ^ x) * _MIX & _M32
    return (x >> 16) ^ x


def key_of(seed: int) -> int:
    """A row key (32 bits) from a seed of any size."""
    seed &= (1 << 64) - 1
    lo = torch.tensor([seed & _M32], dtype=torch.long)
    hi = torch.tensor([(seed >> 32) ^ _GOLDEN], dtype=torch.long)
    return int(hash32(hash32(lo) ^ hash32(hi))[0])


def uniform(
    keys: torch.Tensor, draws: torch.Tensor, vocab_hash: torch.Tensor, count: int = 1
) -> torch.Tensor:
    """[B, count, V] floats in (0, 1): draws ``draws[b]`` .. ``draws[b] + count - 1``
    of row key ``keys[b]``, all in one go (a handful of elementwise kernels)."""
    steps = torch.arange(count, device=keys.device)
    row = hash32(keys[:, None] ^ hash32(draws[:, None] + steps[None, :] + _GOLDEN))
    x = (row[:, :, None] ^ vocab_hash) * _MIX & _M32
    return open_unit(((x >> 16) ^ x) >> (32 - UNIT_BITS))


UNIT_BITS = 23
"""Random bits per uniform draw: ``bits + 0.5`` is exact in float32 for these."""


def open_unit(bits: torch.Tensor) -> torch.Tensor:
    """Integers in [0, 2**UNIT_BITS) -> float32 strictly inside (0, 1). Never 1.0: a
    draw of 1 makes the Gumbel noise infinite, and a masked (-inf) id then scores
    NaN, which argmax picks; with 24 bits the top value rounded up to 1.0."""
    return (bits.to(torch.float32) + 0.5) / float(1 << UNIT_BITS)


def vocab_hash(size: int, device: torch.device) -> torch.Tensor:
    return hash32(torch.arange(size, device=device, dtype=torch.long) * 2 + 1)


def gaussian(keys: torch.Tensor, draws: torch.Tensor, pair_hash: torch.Tensor) -> torch.Tensor:
    """[B, N] standard normal floats: draw ``draws[b]`` of row key ``keys[b]``, N values
    from 2N uniforms (``pair_hash = vocab_hash(2 * N)``) by Box-Muller: like every draw
    here, a row's values do not depend on the rows beside it."""
    u = uniform(keys, draws, pair_hash)[:, 0]
    n = u.shape[-1] // 2
    radius = torch.sqrt(-2.0 * torch.log(u[:, :n]))
    return radius * torch.cos(2.0 * torch.pi * u[:, n:])
