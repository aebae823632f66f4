"""The modded DAC's quantizer: a semantic codebook plus residual codebooks, at a quarter
of the encoder's frame rate.

Encoding: the encoder's latent is downsampled (causal strided conv + ConvNeXt per
factor), run through ``pre_module`` (a window-limited transformer), quantized by
the semantic codebook, and what the semantic code leaves is quantized by the
residual codebooks one after another. Each codebook lookup is factorized (DAC's
``VectorQuantize``): project to a few dimensions, pick the entry nearest in
cosine, project back.

Decoding: each codebook's entry, projected back, summed, through ``post_module``
and the upsampler (transposed conv + ConvNeXt per factor) to the decoder's rate.

Codes of a frame are ``[semantic, residual 0, residual 1, ...]``; out-of-range
codes are clamped to the last entry of their codebook, as the reference does.
Parameter names are the checkpoint's (``semantic_quantizer.quantizers.0.codebook
.weight``, ``quantizer.quantizers.N.in_proj.weight_g`` ...).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from models.blocks.dac_conv import LEGACY, CausalConv, CausalConvTranspose, ConvNeXt
from models.blocks.dac_conv import mark_weight_norm as _mark
from models.blocks.dac_transformer import TransformerShape, WindowTransformer


class VectorQuantize(nn.Module):
    """One factorized codebook (projections stored weight-normed, the older form)."""

    def __init__(self, dim: int, size: int, codebook_dim: int) -> None:
        super().__init__()
        self.in_proj = nn.Conv1d(dim, codebook_dim, 1)
        self.out_proj = nn.Conv1d(codebook_dim, dim, 1)
        _mark(self.in_proj, LEGACY)
        _mark(self.out_proj, LEGACY)
        self.codebook = nn.Embedding(size, codebook_dim)

    def quantize(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``z`` [B, dim, T] -> (its quantized value [B, dim, T], codes [B, T])."""
        z_e = self.in_proj(z)
        flat = F.normalize(z_e.transpose(1, 2).reshape(-1, z_e.shape[1]))
        book = F.normalize(self.codebook.weight)
        # Squared distance written as the reference writes it, so ties break alike.
        dist = flat.pow(2).sum(1, keepdim=True) - 2 * flat @ book.t() + book.pow(2).sum(1)[None, :]
        codes = (-dist).max(1)[1].view(z.shape[0], -1)
        z_q = self.codebook(codes).transpose(1, 2)
        # z_e + (z_q - z_e) is z_q up to rounding; kept as the reference computes it.
        return self.out_proj(z_e + (z_q - z_e)), codes

    def lookup(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, T] -> [B, dim, T]."""
        return self.out_proj(self.codebook(codes).transpose(1, 2))


class ResidualVQ(nn.Module):
    def __init__(self, dim: int, count: int, size: int, codebook_dim: int) -> None:
        super().__init__()
        self.size = size
        self.quantizers = nn.ModuleList(
            VectorQuantize(dim, size, codebook_dim) for _ in range(count)
        )

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``z`` [B, dim, T] -> (sum of the quantized parts [B, dim, T], codes [B, n, T])."""
        total: torch.Tensor | float = 0.0
        residual = z
        codes = []
        for quantizer in self.quantizers:
            part, code = quantizer.quantize(residual)
            total = total + part
            residual = residual - part
            codes.append(code)
        assert isinstance(total, torch.Tensor)
        return total, torch.stack(codes, dim=1)

    def from_codes(self, codes: torch.Tensor) -> torch.Tensor:
        total: torch.Tensor | float = 0.0
        for i, quantizer in enumerate(self.quantizers):
            total = total + quantizer.lookup(codes[:, i])
        assert isinstance(total, torch.Tensor)
        return total


class Quantizer(nn.Module):
    """``DownsampleResidualVectorQuantize``: latent [B, dim, 4T] <-> codes [B, 1 + n, T]
    (4 = the product of ``factors``)."""

    def __init__(
        self,
        dim: int,
        residual: int,
        size: int,
        semantic_size: int,
        codebook_dim: int,
        factors: tuple[int, ...],
        transformer: TransformerShape,
    ) -> None:
        super().__init__()
        self.semantic_quantizer = ResidualVQ(dim, 1, semantic_size, codebook_dim)
        self.quantizer = ResidualVQ(dim, residual, size, codebook_dim)
        self.downsample = nn.Sequential(
            *(
                nn.Sequential(CausalConv(dim, dim, f, stride=f, normed=False), ConvNeXt(dim))
                for f in factors
            )
        )
        self.upsample = nn.Sequential(
            *(
                nn.Sequential(CausalConvTranspose(dim, dim, f, f, normed=False), ConvNeXt(dim))
                for f in reversed(factors)
            )
        )
        self.pre_module = WindowTransformer(transformer)
        self.post_module = WindowTransformer(transformer)

    def encode(self, latent: torch.Tensor) -> torch.Tensor:
        z = self.pre_module(self.downsample(latent))
        semantic, semantic_codes = self.semantic_quantizer(z)
        _, codes = self.quantizer(z - semantic)
        return torch.cat([semantic_codes, codes], dim=1)

    def embed(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, 1 + n, T] -> the summed codebook entries [B, dim, T]."""
        semantic = codes[:, :1].clamp(max=self.semantic_quantizer.size - 1)
        residual = codes[:, 1:].clamp(max=self.quantizer.size - 1)
        return self.semantic_quantizer.from_codes(semantic) + self.quantizer.from_codes(residual)

    def frames(self, codes: torch.Tensor, start: torch.Tensor | None = None) -> torch.Tensor:
        """codes [B, 1 + n, T] -> ``post_module``'s output [B, dim, T]: the part of
        decoding that looks far back (``start``: see ``WindowTransformer.forward``)."""
        return self.post_module(self.embed(codes), start)
