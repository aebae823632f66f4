"""Mimi's split residual vector quantizer: codebook 0 (semantic) in ``rvq_first``,
the others in ``rvq_rest``, each with its own 1x1 projections in and out.

Both halves quantize the same latents (``rvq_rest`` does not see ``rvq_first``'s
residual); decoding adds the two halves' projected sums. A codebook's vectors are
``embedding_sum / max(cluster_usage, 1e-5)``, computed once at load.

Module names follow Kyutai's checkpoints (``moshi.quantization``:
``rvq_first.input_proj.weight``, ``rvq_first.vq.layers.K._codebook.embedding_sum``,
``cluster_usage``, ``_initialized``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

EPSILON = 1e-5


class Codebook(nn.Module):
    """``EuclideanCodebook``'s stored state (the running averages it was trained with)."""

    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("_initialized", torch.ones(1))
        self.register_buffer("cluster_usage", torch.ones(size))
        self.register_buffer("embedding_sum", torch.zeros(size, dim))

    def vectors(self) -> torch.Tensor:
        return self.embedding_sum / self.cluster_usage.clamp(min=EPSILON)[:, None]


class _VQ(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self._codebook = Codebook(size, dim)


class _Layers(nn.Module):
    def __init__(self, count: int, size: int, dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_VQ(size, dim) for _ in range(count))


class RVQ(nn.Module):
    """``count`` codebooks over ``dim``-wide vectors, projected from and to ``io_dim``."""

    def __init__(self, count: int, size: int, dim: int, io_dim: int) -> None:
        super().__init__()
        self.input_proj = nn.Conv1d(io_dim, dim, 1, bias=False)
        self.output_proj = nn.Conv1d(dim, io_dim, 1, bias=False)
        self.vq = _Layers(count, size, dim)
        self.register_buffer("tables", torch.zeros(count, size, dim), persistent=False)

    def refresh(self) -> None:
        """Codebook vectors from the loaded state (call after loading)."""
        self.tables = torch.stack([vq._codebook.vectors() for vq in self.vq.layers])

    @property
    def count(self) -> int:
        return len(self.vq.layers)

    def encode(self, x: torch.Tensor, count: int) -> torch.Tensor:
        """Latents [B, io_dim, T] -> codes [B, count, T]: the nearest vector of each
        codebook in turn, each to the residual the previous ones leave."""
        residual = self.input_proj(x)
        codes = []
        for table in self.tables[:count]:
            flat = residual.transpose(1, 2).reshape(-1, residual.shape[1])
            # torch.cdist as moshi calls it: the same arithmetic, so ties break alike.
            ids = torch.cdist(flat[None], table[None], p=2)[0].argmin(-1)
            ids = ids.view(residual.shape[0], residual.shape[2])
            residual = residual - F.embedding(ids, table).transpose(1, 2)
            codes.append(ids)
        return torch.stack(codes, dim=1)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes [B, n, T] (n <= count) -> [B, io_dim, T]."""
        total = F.embedding(codes[:, 0], self.tables[0])
        for i in range(1, codes.shape[1]):
            total = total + F.embedding(codes[:, i], self.tables[i])
        return self.output_proj(total.transpose(1, 2))


class SplitRVQ(nn.Module):
    def __init__(self, semantic: int, acoustic: int, size: int, dim: int, io_dim: int) -> None:
        super().__init__()
        self.rvq_first = RVQ(semantic, size, dim, io_dim)
        self.rvq_rest = RVQ(acoustic, size, dim, io_dim)
        self.size = size

    def refresh(self) -> None:
        self.rvq_first.refresh()
        self.rvq_rest.refresh()

    @property
    def semantic(self) -> int:
        return self.rvq_first.count

    def encode(self, x: torch.Tensor, count: int) -> torch.Tensor:
        """Latents [B, io_dim, T] -> codes [B, count, T], codebook 0 first."""
        codes = self.rvq_first.encode(x, min(count, self.semantic))
        if count > self.semantic:
            codes = torch.cat((codes, self.rvq_rest.encode(x, count - self.semantic)), dim=1)
        return codes

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes [B, n, T] -> latents [B, io_dim, T]."""
        out = self.rvq_first.decode(codes[:, : self.semantic])
        if codes.shape[1] > self.semantic:
            out = out + self.rvq_rest.decode(codes[:, self.semantic :])
        return out
