"""The modded DAC's convolutions: causal convs, Snake, residual units, weight norm.

Every convolution of the codec is causal: a conv pads only on the left (by its
reach minus its stride), a transposed conv drops the samples its kernel spills
past the end. An output sample therefore depends only on input at or before it,
which is what lets a window of frames decode the same audio as the whole
sequence once the window reaches back far enough.

Weight norm is folded at load: the modules hold plain ``weight`` tensors, and a
conv stored weight-normed is marked with the form the checkpoint stores it in
(:data:`PARAMETRIZED`: ``conv.parametrizations.weight.original0`` (g) and
``original1`` (v), torch's ``parametrizations.weight_norm``; :data:`LEGACY`:
``weight_g`` and ``weight_v``, the older ``torch.nn.utils.weight_norm``).
:func:`stored_shapes` lists the keys and shapes a checkpoint holds for a module
tree, and :func:`fold_weight_norm` turns a checkpoint's tensors into the tree's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import nn
from torch.nn import functional as F

PARAMETRIZED = "parametrized"
LEGACY = "legacy"
_G = {PARAMETRIZED: ".parametrizations.weight.original0", LEGACY: ".weight_g"}
_V = {PARAMETRIZED: ".parametrizations.weight.original1", LEGACY: ".weight_v"}


def mark_weight_norm(conv: nn.Conv1d | nn.ConvTranspose1d, style: str) -> None:
    """Record that ``conv``'s weight is stored weight-normed, in ``style``."""
    conv.weight_norm_style = style  # type: ignore[assignment]


def stored_shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """The checkpoint keys and shapes that load ``model``: its state, with each marked
    conv's ``weight`` as the (g, v) pair it is stored as (g is one value per slice
    of the first dimension)."""
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    for name, module in model.named_modules():
        style = getattr(module, "weight_norm_style", None)
        if style is None:
            continue
        shape = shapes.pop(f"{name}.weight")
        shapes[name + _G[style]] = (shape[0],) + (1,) * (len(shape) - 1)
        shapes[name + _V[style]] = shape
    return shapes


def fold_weight_norm(
    model: nn.Module, state: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """``state`` (a checkpoint's tensors, already checked against :func:`stored_shapes`)
    with every marked conv's (g, v) pair replaced by its weight ``g * v / |v|``."""
    out = dict(state)
    for name, module in model.named_modules():
        style = getattr(module, "weight_norm_style", None)
        if style is None:
            continue
        g = out.pop(name + _G[style]).float()
        v = out.pop(name + _V[style]).float()
        # torch's own kernel, which both weight-norm forms run on every forward.
        out[f"{name}.weight"] = torch._weight_norm(v, g, 0)
    return out


class CausalConv(nn.Module):
    """A conv padded on the left only (``CausalConvNet``); ``normed``: stored weight-normed."""

    def __init__(
        self,
        c_in: int,
        c_out: int,
        kernel: int,
        stride: int = 1,
        dilation: int = 1,
        groups: int = 1,
        normed: bool = True,
        style: str = PARAMETRIZED,
    ) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, stride, dilation=dilation, groups=groups)
        if normed:
            mark_weight_norm(self.conv, style)
        self.stride = stride
        self.reach = (kernel - 1) * dilation + 1
        self.padding = self.reach - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        frames = (length - self.reach + self.padding) / self.stride + 1
        # Right zeros so the last stride is whole (none when the length is a multiple).
        extra = (math.ceil(frames) - 1) * self.stride + (self.reach - self.padding) - length
        return self.conv(F.pad(x, (self.padding, extra)))


class CausalConvTranspose(nn.Module):
    """A transposed conv whose output is cut to ``stride`` samples per input sample,
    dropping the kernel's spill past the end (``CausalTransConvNet``)."""

    def __init__(
        self,
        c_in: int,
        c_out: int,
        kernel: int,
        stride: int,
        normed: bool = True,
        style: str = PARAMETRIZED,
    ) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(c_in, c_out, kernel, stride)
        if normed:
            mark_weight_norm(self.conv, style)
        self.spill = kernel - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return y[..., : y.shape[-1] - self.spill]


class Snake(nn.Module):
    """``x + sin(a x)^2 / a`` with a learned frequency per channel."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The reference adds 1e-9 before the reciprocal; kept for equal numerics.
        return x + (self.alpha + 1e-9).reciprocal() * torch.sin(self.alpha * x).pow(2)


class ResidualUnit(nn.Module):
    """Snake -> dilated causal conv (k7; depthwise with ``groups`` = channels) -> Snake ->
    conv (k1), added to the input."""

    def __init__(
        self, channels: int, dilation: int, groups: int = 1, style: str = PARAMETRIZED
    ) -> None:
        super().__init__()
        self.block = nn.Sequential(
            Snake(channels),
            CausalConv(channels, channels, 7, dilation=dilation, groups=groups, style=style),
            Snake(channels),
            CausalConv(channels, channels, 1, style=style),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x[..., : y.shape[-1]] + y


class ConvNeXt(nn.Module):
    """ConvNeXt block: causal depthwise conv (k7) -> LayerNorm -> Linear x4 -> GELU ->
    Linear -> per-channel scale, added to the input. No weight norm."""

    def __init__(self, dim: int, mlp_ratio: int = 4, kernel: int = 7) -> None:
        super().__init__()
        self.dwconv = CausalConv(dim, dim, kernel, groups=dim, normed=False)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, mlp_ratio * dim)
        self.pwconv2 = nn.Linear(mlp_ratio * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dwconv(x).transpose(1, 2)
        h = self.pwconv2(F.gelu(self.pwconv1(self.norm(h))))
        return x + (self.gamma * h).transpose(1, 2)
