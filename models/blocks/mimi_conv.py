"""Mimi's SEANet: causal convolutions, transposed convolutions, ELU residual blocks,
the encoder (24 kHz audio -> 25 Hz latents) and the decoder (back), with state for
exact streaming.

Every convolution is causal: a conv pads only on the left (by its reach minus its
stride, with zeros, or with copies of the first sample for ``replicate``), a
transposed conv drops the ``kernel - stride`` samples its kernel spills past the
end. So a stream that keeps, per conv, its last ``reach - 1`` inputs and, per
transposed conv, the spill of its last input (without the bias, which the next
chunk's output gets anyway) decodes chunk by chunk what the whole sequence
decodes at once. Rows of one call may hold chunks of different lengths (right
padded to the longest): what a row keeps is taken at its own length, and a
transposed conv's padded inputs are zeroed first so they spill nothing into it.

Module names follow Kyutai's checkpoints (``moshi``'s ``StreamingConv1d`` wraps
``NormConv1d`` wraps ``nn.Conv1d``: ``model.N.conv.conv.weight``; transposed:
``model.N.convtr.convtr.weight``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from models.kit.tables import Column, SlotTables


class StreamRows:
    """The rows of a state pool one call continues: each stateful layer reads its own
    table's rows once and writes them back once (``index`` on the tables' device)."""

    def __init__(self, tables: SlotTables, index: torch.Tensor) -> None:
        self.tables = tables
        self.index = index

    def read(self, key: str) -> torch.Tensor:
        return self.tables[key].index_select(0, self.index)

    def write(self, key: str, value: torch.Tensor) -> None:
        self.tables[key].index_copy_(0, self.index, value.to(self.tables[key].dtype))

    def table(self, key: str) -> torch.Tensor:
        return self.tables[key]


class Stateful(nn.Module):
    """A layer with per-stream state: its table's name (set by the model that owns it,
    its qualified module name) and the shape of one stream's row."""

    state_key: str = ""

    def state_columns(self, dtype: torch.dtype) -> dict[str, Column]:
        raise NotImplementedError


def tail(full: torch.Tensor, ends: torch.Tensor, keep: int) -> torch.Tensor:
    """Per row b the ``keep`` steps of ``full`` [B, C, T] that end at ``ends[b]``."""
    index = ends[:, None] + torch.arange(-keep, 0, device=full.device)[None]
    return full.gather(2, index[:, None, :].expand(full.shape[0], full.shape[1], keep))


def valid_steps(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """[B, 1, steps]: True where a step is inside its row's chunk."""
    return (torch.arange(steps, device=lengths.device)[None] < lengths[:, None])[:, None]


class _Conv1d(nn.Module):
    """``NormConv1d`` without a norm: the checkpoint's extra ``.conv`` level."""

    def __init__(self, conv: nn.Conv1d) -> None:
        super().__init__()
        self.conv = conv


class _ConvTranspose1d(nn.Module):
    def __init__(self, convtr: nn.ConvTranspose1d) -> None:
        super().__init__()
        self.convtr = convtr


class CausalConv(Stateful):
    """A conv padded on the left only (``StreamingConv1d`` with ``causal=True``)."""

    def __init__(
        self,
        c_in: int,
        c_out: int,
        kernel: int,
        stride: int = 1,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = True,
        pad_mode: str = "constant",
    ) -> None:
        super().__init__()
        if pad_mode not in ("constant", "replicate"):
            raise ValueError(f"pad_mode must be constant or replicate, got {pad_mode!r}")
        self.conv = _Conv1d(
            nn.Conv1d(c_in, c_out, kernel, stride, dilation=dilation, groups=groups, bias=bias)
        )
        self.stride = stride
        self.history = (kernel - 1) * dilation + 1 - stride
        self.pad_mode = pad_mode

    @property
    def inner(self) -> nn.Conv1d:
        return self.conv.conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Whole sequences [B, C, T] (T a multiple of the stride, as Mimi's are)."""
        if x.shape[-1] % self.stride:
            raise ValueError(
                f"a strided conv needs a multiple of {self.stride} steps, got {x.shape[-1]}"
            )
        if self.history:
            x = F.pad(x, (self.history, 0), mode=self.pad_mode)
        return self.inner(x)

    def state_columns(self, dtype: torch.dtype) -> dict[str, Column]:
        if not self.history:
            return {}
        return {self.state_key: Column(dtype, (self.inner.in_channels, self.history))}

    def step(self, x: torch.Tensor, lengths: torch.Tensor, rows: StreamRows) -> torch.Tensor:
        """The next steps of each row's stream: ``x`` [B, C, T], row b's first
        ``lengths[b]`` steps real (stride 1 only: the decoder's convs)."""
        if self.stride != 1 or self.pad_mode != "constant":
            raise ValueError("only stride-1 zero-padded convs stream")
        if not self.history:
            return self.inner(x)
        full = torch.cat((rows.read(self.state_key), x), dim=2)
        rows.write(self.state_key, tail(full, lengths + self.history, self.history))
        return self.inner(full)


class CausalConvTranspose(Stateful):
    """A transposed conv cut to ``stride`` outputs per input (``StreamingConvTranspose1d``
    with ``causal=True``): the ``kernel - stride`` spilled samples are dropped, or, when
    streaming, kept and added to the next chunk's first outputs."""

    def __init__(
        self, c_in: int, c_out: int, kernel: int, stride: int, groups: int = 1, bias: bool = True
    ) -> None:
        super().__init__()
        if kernel < stride:
            raise ValueError(f"a transposed conv's kernel ({kernel}) is below its stride")
        self.convtr = _ConvTranspose1d(
            nn.ConvTranspose1d(c_in, c_out, kernel, stride, groups=groups, bias=bias)
        )
        self.stride = stride
        self.spill = kernel - stride

    @property
    def inner(self) -> nn.ConvTranspose1d:
        return self.convtr.convtr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.inner(x)
        return y[..., : y.shape[-1] - self.spill]

    def state_columns(self, dtype: torch.dtype) -> dict[str, Column]:
        if not self.spill:
            return {}
        return {self.state_key: Column(dtype, (self.inner.out_channels, self.spill))}

    def step(self, x: torch.Tensor, lengths: torch.Tensor, rows: StreamRows) -> torch.Tensor:
        """``x`` [B, C, T] -> [B, C', T * stride]; row b's first ``lengths[b] * stride``
        outputs are real."""
        t = x.shape[-1]
        if not self.spill:
            return self.inner(x)
        y = self.inner(x * valid_steps(lengths, t).to(x.dtype))
        head = y[..., : self.spill] + rows.read(self.state_key)
        y = torch.cat((head, y[..., self.spill :]), dim=2)
        spilled = tail(y, lengths * self.stride + self.spill, self.spill)
        bias = self.inner.bias
        if bias is not None:
            spilled = spilled - bias[None, :, None]
        rows.write(self.state_key, spilled)
        return y[..., : t * self.stride]


class ResnetBlock(nn.Module):
    """ELU -> conv (k, dilation) to ``dim // compress`` -> ELU -> conv (1) back, added to
    the input (``SEANetResnetBlock`` with ``true_skip``)."""

    def __init__(self, dim: int, kernel: int, dilation: int, compress: int) -> None:
        super().__init__()
        hidden = dim // compress
        self.block = nn.ModuleList(
            [
                nn.ELU(),
                CausalConv(dim, hidden, kernel, dilation=dilation),
                nn.ELU(),
                CausalConv(hidden, dim, 1),
            ]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for layer in self.block:
            h = layer(h)
        return x + h

    def step(self, x: torch.Tensor, lengths: torch.Tensor, rows: StreamRows) -> torch.Tensor:
        h = self.block[1].step(F.elu(x), lengths, rows)
        return x + self.block[3].step(F.elu(h), lengths, rows)


def _residuals(
    dim: int, layers: int, kernel: int, dilation_base: int, compress: int
) -> list[nn.Module]:
    return [ResnetBlock(dim, kernel, dilation_base**j, compress) for j in range(layers)]


class SEANetEncoder(nn.Module):
    """Audio [B, 1, T] -> latents [B, dimension, T / prod(ratios)]. ``ratios`` in the
    decoder's order (the encoder downsamples by them reversed), as Mimi's config
    gives them."""

    def __init__(
        self,
        *,
        dimension: int,
        n_filters: int,
        ratios: Sequence[int],
        n_residual_layers: int,
        kernel_size: int,
        residual_kernel_size: int,
        last_kernel_size: int,
        dilation_base: int,
        compress: int,
        channels: int = 1,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = [CausalConv(channels, n_filters, kernel_size)]
        mult = 1
        for ratio in reversed(ratios):
            dim = mult * n_filters
            layers += _residuals(
                dim, n_residual_layers, residual_kernel_size, dilation_base, compress
            )
            layers += [nn.ELU(), CausalConv(dim, 2 * dim, 2 * ratio, stride=ratio)]
            mult *= 2
        layers += [nn.ELU(), CausalConv(mult * n_filters, dimension, last_kernel_size)]
        self.model = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.model:
            x = layer(x)
        return x


class SEANetDecoder(nn.Module):
    """Latents [B, dimension, T] -> audio [B, 1, T * prod(ratios)], whole or streamed."""

    def __init__(
        self,
        *,
        dimension: int,
        n_filters: int,
        ratios: Sequence[int],
        n_residual_layers: int,
        kernel_size: int,
        residual_kernel_size: int,
        last_kernel_size: int,
        dilation_base: int,
        compress: int,
        channels: int = 1,
    ) -> None:
        super().__init__()
        mult = 2 ** len(ratios)
        layers: list[nn.Module] = [CausalConv(dimension, mult * n_filters, kernel_size)]
        for ratio in ratios:
            dim = mult * n_filters
            layers += [nn.ELU(), CausalConvTranspose(dim, dim // 2, 2 * ratio, ratio)]
            layers += _residuals(
                dim // 2, n_residual_layers, residual_kernel_size, dilation_base, compress
            )
            mult //= 2
        layers += [nn.ELU(), CausalConv(n_filters, channels, last_kernel_size)]
        self.model = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.model:
            x = layer(x)
        return x

    def step(self, x: torch.Tensor, lengths: torch.Tensor, rows: StreamRows) -> torch.Tensor:
        """``x`` [B, dimension, T] with row b's first ``lengths[b]`` steps real ->
        [B, 1, T * hop] with its first ``lengths[b] * hop`` samples real."""
        for layer in self.model:
            if isinstance(layer, nn.ELU):
                x = F.elu(x)
            elif isinstance(layer, CausalConvTranspose):
                x = layer.step(x, lengths, rows)
                lengths = lengths * layer.stride
            else:
                x = layer.step(x, lengths, rows)
        return x
