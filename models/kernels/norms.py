"""Fused RMSNorm, and RMSNorm + rotary embedding of attention heads, for CUDA.

A decode step of a small batch is bound by the number of kernels, not by their
work: eagerly an RMSNorm is seven kernels (cast, square, mean, add, rsqrt,
multiply, cast) and the rotary embedding five more per query and key. A frame
of Qwen3-TTS runs 103 decoder layers (28 talker + 15 x 5 code predictor), each
with four norms and two rotations: about 3,500 launches these two kernels
replace with 412. Both compute in fp32 and round once at the end (eager rounds
to the model dtype between its steps, so bf16 outputs differ in the last bit).
"""

from __future__ import annotations

import torch

from models.kernels.paged_decode import kernel_available

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the install
    triton = None


if triton is not None:

    @triton.jit
    def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, eps, dim, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        live = cols < dim
        x = tl.load(x_ptr + row * dim + cols, mask=live, other=0.0).to(tl.float32)
        scale = tl.rsqrt(tl.sum(x * x, axis=0) / dim + eps)
        w = tl.load(w_ptr + cols, mask=live, other=0.0).to(tl.float32)
        tl.store(
            out_ptr + row * dim + cols, (x * scale * w).to(out_ptr.dtype.element_ty), mask=live
        )

    @triton.jit
    def _norm_rope_kernel(x_ptr, w_ptr, cos_ptr, sin_ptr, out_ptr, eps, heads, HALF: tl.constexpr):
        # One program per (token, head) row of x [tokens, heads, 2 * HALF];
        # cos/sin [tokens, 2 * HALF].
        row = tl.program_id(0).to(tl.int64)
        token = row // heads
        cols = tl.arange(0, HALF)
        base = row * 2 * HALF
        x1 = tl.load(x_ptr + base + cols).to(tl.float32)
        x2 = tl.load(x_ptr + base + HALF + cols).to(tl.float32)
        scale = tl.rsqrt((tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / (2 * HALF) + eps)
        x1 = x1 * scale * tl.load(w_ptr + cols).to(tl.float32)
        x2 = x2 * scale * tl.load(w_ptr + HALF + cols).to(tl.float32)
        at = token * 2 * HALF
        c1 = tl.load(cos_ptr + at + cols).to(tl.float32)
        c2 = tl.load(cos_ptr + at + HALF + cols).to(tl.float32)
        s1 = tl.load(sin_ptr + at + cols).to(tl.float32)
        s2 = tl.load(sin_ptr + at + HALF + cols).to(tl.float32)
        kind = out_ptr.dtype.element_ty
        tl.store(out_ptr + base + cols, (x1 * c1 - x2 * s1).to(kind))
        tl.store(out_ptr + base + HALF + cols, (x2 * c2 + x1 * s2).to(kind))


def fused_available(x: torch.Tensor) -> bool:
    return kernel_available(x.device) and x.is_contiguous()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim of a contiguous CUDA tensor, one kernel."""
    dim = x.shape[-1]
    out = torch.empty_like(x)
    rows = x.numel() // dim
    _rms_norm_kernel[(rows,)](x, weight, out, eps, dim, BLOCK=triton.next_power_of_2(dim))
    return out


def norm_rope(
    x: torch.Tensor, weight: torch.Tensor, eps: float, cos: torch.Tensor, sin: torch.Tensor
) -> torch.Tensor:
    """x [B, T, heads, D] contiguous: per head RMSNorm (``weight`` [D]) then the NeoX
    rotary embedding with cos/sin [B, T, D]; same layout out, one kernel."""
    b, t, heads, dim = x.shape
    out = torch.empty_like(x)
    cos = cos.expand(b, t, dim).contiguous()
    sin = sin.expand(b, t, dim).contiguous()
    _norm_rope_kernel[(b * t * heads,)](x, weight, cos, sin, out, eps, heads, HALF=dim // 2)
    return out
