"""Decode attention over a paged KV cache: one query position per row.

On CUDA a Triton kernel reads each row's blocks in place, the row's length
coming from a device tensor, so a decode step needs no host value and can be
captured in a CUDA graph. Each program takes one (row, kv head) and the query
heads that share it, and keeps a running softmax over the row's blocks in
fp32. Elsewhere (the CPU, or no Triton) the blocks are gathered and attended
with the same masked attention as prefill; that needs the batch's longest
length on the host.
"""

from __future__ import annotations

import torch

from models.attention import attention_bias, grouped_attention

try:  # Triton ships with CUDA builds of torch; CPU installs have none.
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the install
    triton = None


if triton is not None:

    @triton.jit
    def _paged_decode_kernel(
        q_ptr,
        k_ptr,
        v_ptr,
        tables_ptr,
        lengths_ptr,
        out_ptr,
        scale,
        stride_qb,
        stride_qh,
        stride_kblock,
        stride_kpos,
        stride_khead,
        stride_tb,
        stride_ob,
        stride_oh,
        GROUPS: tl.constexpr,
        GROUPS_P: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        row = tl.program_id(0)
        kv_head = tl.program_id(1)
        length = tl.load(lengths_ptr + row)
        g = tl.arange(0, GROUPS_P)
        d = tl.arange(0, HEAD_DIM)
        n = tl.arange(0, BLOCK)
        heads = kv_head * GROUPS + g
        live = g < GROUPS
        q = tl.load(
            q_ptr + row * stride_qb + heads[:, None] * stride_qh + d[None, :],
            mask=live[:, None],
            other=0.0,
        ).to(tl.float32)
        q = q * scale
        best = tl.full([GROUPS_P], float("-inf"), tl.float32)
        total = tl.zeros([GROUPS_P], tl.float32)
        acc = tl.zeros([GROUPS_P, HEAD_DIM], tl.float32)
        for i in range(0, tl.cdiv(length, BLOCK)):
            block = tl.load(tables_ptr + row * stride_tb + i).to(tl.int64)
            at = block * stride_kblock + n[:, None] * stride_kpos + kv_head * stride_khead
            keys = tl.load(k_ptr + at + d[None, :]).to(tl.float32)
            scores = tl.sum(q[:, None, :] * keys[None, :, :], axis=2)
            scores = tl.where((i * BLOCK + n < length)[None, :], scores, float("-inf"))
            new_best = tl.maximum(best, tl.max(scores, axis=1))
            weights = tl.exp(scores - new_best[:, None])
            decay = tl.exp(best - new_best)
            total = total * decay + tl.sum(weights, axis=1)
            values = tl.load(v_ptr + at + d[None, :]).to(tl.float32)
            acc = acc * decay[:, None] + tl.sum(weights[:, :, None] * values[None, :, :], axis=1)
            best = new_best
        out = acc / total[:, None]
        tl.store(
            out_ptr + row * stride_ob + heads[:, None] * stride_oh + d[None, :],
            out.to(out_ptr.dtype.element_ty),
            mask=live[:, None],
        )


def kernel_available(device: torch.device) -> bool:
    return triton is not None and device.type == "cuda"


def paged_decode_attention(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    tables: torch.Tensor,
    lengths: torch.Tensor,
    max_length: int | None = None,
) -> torch.Tensor:
    """q [B, H, 1, D]; pools [blocks, block, KVH, D]; tables [B, max_blocks] (int32);
    lengths [B] (>= 1). Returns [B, H, 1, D]: each row's query against its first
    ``lengths[b]`` positions."""
    if kernel_available(q.device):
        return _kernel(q, k_pool, v_pool, tables, lengths)
    if max_length is None:
        raise ValueError("gathered paged attention needs the batch's longest length")
    return gathered_decode_attention(q, k_pool, v_pool, tables, lengths, max_length)


def _kernel(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    tables: torch.Tensor,
    lengths: torch.Tensor,
) -> torch.Tensor:
    b, heads, _, dim = q.shape
    kv_heads, block = k_pool.shape[2], k_pool.shape[1]
    groups = heads // kv_heads
    q3 = q.reshape(b, heads, dim)
    out = torch.empty_like(q3)
    _paged_decode_kernel[(b, kv_heads)](
        q3,
        k_pool,
        v_pool,
        tables,
        lengths,
        out,
        dim**-0.5,
        q3.stride(0),
        q3.stride(1),
        k_pool.stride(0),
        k_pool.stride(1),
        k_pool.stride(2),
        tables.stride(0),
        out.stride(0),
        out.stride(1),
        GROUPS=groups,
        GROUPS_P=triton.next_power_of_2(groups),
        HEAD_DIM=dim,
        BLOCK=block,
        num_warps=4,
    )
    return out.view(b, heads, 1, dim)


def gathered_decode_attention(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    tables: torch.Tensor,
    lengths: torch.Tensor,
    max_length: int,
) -> torch.Tensor:
    """The same attention by gathering each row's first ``max_length`` positions."""
    block = k_pool.shape[1]
    used = -(-max_length // block)
    picked = tables[:, :used].long()
    b = q.shape[0]
    keys = k_pool[picked].reshape(b, used * block, *k_pool.shape[2:])[:, :max_length]
    values = v_pool[picked].reshape(b, used * block, *v_pool.shape[2:])[:, :max_length]
    allowed = torch.arange(max_length, device=q.device)[None, None] < lengths[:, None, None]
    bias = attention_bias(allowed, q.shape[1] // k_pool.shape[2], q.dtype)
    return grouped_attention(q, keys.permute(0, 2, 1, 3), values.permute(0, 2, 1, 3), bias)
