"""ReDimNet's 2-D blocks: what a stage applies to its ``[B, c, f, T]`` view.

``block_2d_type`` of the checkpoint's config picks one for every stage:

- ``convnext_like`` / ``convnext_like_relu``: a ConvNeXt-like block with one 3x3
  grouped convolution (GELU / ReLU);
- ``basic_resnet`` / ``basic_resnet_fwse``: a ResNet basic block whose 3x3
  convolutions are grouped and followed by 1x1 ones (``conv1``+``conv1pw``, ReLU,
  ``bn1``, then ``conv2``+``conv2pw``, ``bn2``), the ``_fwse`` kind gating each
  frequency by a squeeze-and-excitation of the frequency profile (the mean over
  channels and time); then the residual and a ReLU.

Each is wrapped as ``conv_block`` (IDRnD's ``ConvBlock2d``), so parameters are named
``stageN.K.conv_block.*`` as stored.
"""

from __future__ import annotations

import torch
from torch import nn

from models.blocks.redimnet_layers import ConvNeXtLikeBlock, groups_for

BLOCK_2D_TYPES = ("convnext_like", "convnext_like_relu", "basic_resnet", "basic_resnet_fwse")
SE_MAX = 64
SE_MIN = 32


class FrequencySE(nn.Module):
    """Gates [B, C, F, T] per frequency: sigmoid(W2 relu(W1 mean_{C,T} x))."""

    def __init__(self, freqs: int, hidden: int) -> None:
        super().__init__()
        self.squeeze = nn.Linear(freqs, hidden)
        self.exitation = nn.Linear(hidden, freqs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        profile = x.mean(dim=(1, 3))
        gate = torch.sigmoid(self.exitation(torch.relu(self.squeeze(profile))))
        return x * gate[:, None, :, None]


class ResBasicBlock(nn.Module):
    """The ResNet basic block described above (same width in and out, stride 1)."""

    def __init__(self, channels: int, freqs: int, group_divisor: int | None, se: bool) -> None:
        super().__init__()
        grouped = group_divisor is not None
        groups = groups_for(channels, group_divisor)
        conv3 = dict(kernel_size=3, padding=1, bias=False, groups=groups)
        self.conv1 = nn.Conv2d(channels, channels, **conv3)
        self.conv1pw = nn.Conv2d(channels, channels, 1) if grouped else nn.Identity()
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, **conv3)
        self.conv2pw = nn.Conv2d(channels, channels, 1) if grouped else nn.Identity()
        self.bn2 = nn.BatchNorm2d(channels)
        self.se = FrequencySE(freqs, min(SE_MAX, max(channels, SE_MIN))) if se else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn1(torch.relu(self.conv1pw(self.conv1(x))))
        y = self.se(self.bn2(self.conv2pw(self.conv2(y))))
        return torch.relu(y + x)


class Block2d(nn.Module):
    """One 2-D block of the configured kind, under the name ``conv_block``."""

    def __init__(self, kind: str, channels: int, freqs: int, group_divisor: int | None) -> None:
        super().__init__()
        if kind not in BLOCK_2D_TYPES:
            raise ValueError(f"block_2d_type must be one of {BLOCK_2D_TYPES}, got {kind!r}")
        if kind.startswith("convnext_like"):
            activation = "relu" if kind == "convnext_like_relu" else "gelu"
            self.conv_block: nn.Module = ConvNeXtLikeBlock(
                channels, 2, [(3, 3)], group_divisor, activation
            )
        else:
            se = kind == "basic_resnet_fwse"
            self.conv_block = ResBasicBlock(channels, freqs, group_divisor, se)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_block(x)
