"""CAM++: S3Gen's speaker encoder, 16 kHz audio -> the 192-wide x-vector the flow is
conditioned on.

A clip's Kaldi filterbank (80 bins, mean-normalised over the clip: ``fbank.py``) goes
through a 2-D convolutional front end (residual blocks that halve the frequency axis
three times: 80 bins x 32 channels -> 320 rows per frame), a strided TDNN layer (to
25 frames a second, 128 wide), three densely connected blocks of context-aware
layers (12, 24 and 16 layers adding 32 channels each, each layer's output gated by a
sigmoid of the clip's mean and of its own 100-frame segment means), each followed by
a transition that halves the width, then the mean and standard deviation over time
(1,024) and a linear layer with a plain batch norm -> 192. Batch norms use their
running statistics (inference only). Parameter names mirror ``speaker_encoder.*`` of
``s3gen_meanflow.safetensors``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from models.chatterbox.checkpoint import load_weights
from models.chatterbox.fbank import MEL_BINS, xvector_features

PREFIX = "speaker_encoder."
EMBEDDING = 192
FRONT_CHANNELS = 32
TDNN_WIDTH = 128
GROWTH = 32
BOTTLENECK = 128
BLOCKS = ((12, 1), (24, 2), (16, 2))
"""(layers, dilation) of each dense block; every kernel is 3 wide."""
SEGMENT = 100
"""Frames per segment of the context gate's local mean."""
BN_EPS = 1e-5


class Norm(nn.Module):
    """Batch norm with its running statistics, always in inference form; the state
    keys of ``nn.BatchNorm*`` (``affine=False`` keeps no weight and bias)."""

    def __init__(self, channels: int, affine: bool = True) -> None:
        super().__init__()
        self.affine = affine
        if affine:
            self.weight = nn.Parameter(torch.ones(channels))
            self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, ...]."""
        weight = self.weight if self.affine else None
        bias = self.bias if self.affine else None
        return F.batch_norm(
            x, self.running_mean, self.running_var, weight, bias, training=False, eps=BN_EPS
        )


class NormReLU(nn.Module):
    """Batch norm then ReLU, under the checkpoint's ``<name>.batchnorm`` key."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.batchnorm = Norm(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.batchnorm(x))


# -- front end: 2-D convolutions over (frequency, time) ----------------------------------


class ResBlock(nn.Module):
    """Two 3x3 convolutions with a residual; the first may halve the frequency axis."""

    def __init__(self, channels: int, freq_stride: int) -> None:
        super().__init__()
        stride = (freq_stride, 1)
        self.conv1 = nn.Conv2d(channels, channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = Norm(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=1, padding=1, bias=False)
        self.bn2 = Norm(channels)
        self.shortcut = nn.Sequential()
        if freq_stride != 1:
            self.shortcut = nn.Sequential(
                nn.Conv2d(channels, channels, 1, stride=stride, bias=False), Norm(channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class FrontEnd(nn.Module):
    """[B, 80, T] features -> [B, 320, T]: 32 channels of the 10 frequency rows left
    after three halvings."""

    def __init__(self, channels: int = FRONT_CHANNELS) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, stride=1, padding=1, bias=False)
        self.bn1 = Norm(channels)
        self.layer1 = nn.Sequential(ResBlock(channels, 2), ResBlock(channels, 1))
        self.layer2 = nn.Sequential(ResBlock(channels, 2), ResBlock(channels, 1))
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=(2, 1), padding=1, bias=False)
        self.bn2 = Norm(channels)
        self.out_channels = channels * (MEL_BINS // 8)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(feats.unsqueeze(1))))
        x = self.layer2(self.layer1(x))
        x = F.relu(self.bn2(self.conv2(x)))
        b, c, f, t = x.shape
        return x.reshape(b, c * f, t)


# -- the TDNN trunk ----------------------------------------------------------------


class TDNN(nn.Module):
    """Convolution (kernel 5, stride 2, centred) then batch norm and ReLU."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(in_channels, out_channels, 5, stride=2, padding=2, bias=False)
        self.nonlinear = NormReLU(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(x))


class ContextGate(nn.Module):
    """A dilated convolution whose output channels are gated by a sigmoid of the
    input's clip mean plus its segment mean (each frame's 100-frame segment)."""

    def __init__(self, channels: int, out_channels: int, dilation: int) -> None:
        super().__init__()
        self.linear_local = nn.Conv1d(
            channels, out_channels, 3, padding=dilation, dilation=dilation, bias=False
        )
        self.linear1 = nn.Conv1d(channels, channels // 2, 1)
        self.linear2 = nn.Conv1d(channels // 2, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[-1]
        # Each segment's mean (the last segment over the frames it has), back per frame.
        segments = F.avg_pool1d(x, SEGMENT, SEGMENT, ceil_mode=True)
        per_frame = segments.repeat_interleave(SEGMENT, dim=-1)[..., :t]
        context = x.mean(dim=-1, keepdim=True) + per_frame
        gate = torch.sigmoid(self.linear2(F.relu(self.linear1(context))))
        return self.linear_local(x) * gate


class DenseLayer(nn.Module):
    """Norm, ReLU, 1x1 bottleneck, norm, ReLU, context-gated convolution: 32 new
    channels to append."""

    def __init__(self, in_channels: int, dilation: int) -> None:
        super().__init__()
        self.nonlinear1 = NormReLU(in_channels)
        self.linear1 = nn.Conv1d(in_channels, BOTTLENECK, 1, bias=False)
        self.nonlinear2 = NormReLU(BOTTLENECK)
        self.cam_layer = ContextGate(BOTTLENECK, GROWTH, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))))


class DenseBlock(nn.Module):
    """Layers ``tdnnd1``.. each appending its output to everything before it."""

    def __init__(self, layers: int, in_channels: int, dilation: int) -> None:
        super().__init__()
        self.layers = layers
        for i in range(layers):
            self.add_module(f"tdnnd{i + 1}", DenseLayer(in_channels + i * GROWTH, dilation))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.layers):
            x = torch.cat((x, getattr(self, f"tdnnd{i + 1}")(x)), dim=1)
        return x


class Transit(nn.Module):
    """Norm, ReLU, then a 1x1 convolution (no bias) to half the width."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.nonlinear = NormReLU(in_channels)
        self.linear = nn.Conv1d(in_channels, out_channels, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.nonlinear(x))


class PlainNorm(nn.Module):
    """Batch norm with no affine part and no activation, under ``<name>.batchnorm``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.batchnorm = Norm(channels, affine=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.batchnorm(x)


class Embedding(nn.Module):
    """Pooled statistics [B, C] -> [B, 192]: a 1x1 convolution and a plain batch norm."""

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(in_channels, EMBEDDING, 1, bias=False)
        self.nonlinear = PlainNorm(EMBEDDING)

    def forward(self, stats: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(stats.unsqueeze(-1)).squeeze(-1))


class XVector(nn.Module):
    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.tdnn = TDNN(in_channels, TDNN_WIDTH)
        width = TDNN_WIDTH
        for i, (layers, dilation) in enumerate(BLOCKS, start=1):
            self.add_module(f"block{i}", DenseBlock(layers, width, dilation))
            width += layers * GROWTH
            self.add_module(f"transit{i}", Transit(width, width // 2))
            width //= 2
        self.out_nonlinear = NormReLU(width)
        self.dense = Embedding(2 * width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, 320, T] -> [B, 192]."""
        x = self.tdnn(x)
        for i in range(1, len(BLOCKS) + 1):
            x = getattr(self, f"transit{i}")(getattr(self, f"block{i}")(x))
        x = self.out_nonlinear(x)
        stats = torch.cat((x.mean(dim=-1), x.std(dim=-1, unbiased=True)), dim=-1)
        return self.dense(stats)


class CAMPPlus(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = FrontEnd()
        self.xvector = XVector(self.head.out_channels)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        """Mean-normalised filterbanks [B, T, 80] -> x-vectors [B, 192]."""
        return self.xvector(self.head(feats.transpose(1, 2)))

    @torch.inference_mode()
    def embed(self, wav16k: torch.Tensor | np.ndarray) -> torch.Tensor:
        """One 16 kHz clip [samples] (float, unit full scale; at least 400 samples) ->
        its x-vector [192] float32, as the reference's ``CAMPPlus.inference`` gives it
        for a batch of that one clip."""
        param = next(self.parameters())
        wav = torch.as_tensor(wav16k).to(device=param.device, dtype=torch.float32)
        feats = xvector_features(wav).to(param.dtype)
        return self(feats.unsqueeze(0))[0].float()


def load_campplus(state: Mapping[str, torch.Tensor]) -> CAMPPlus:
    """CAM++ from an S3Gen checkpoint's tensors (its ``speaker_encoder.*`` keys; the
    others are ignored). Every key must be there and none extra: a ``ValueError`` names
    the ones that differ (the first few of each)."""
    sub = {k[len(PREFIX) :]: v for k, v in state.items() if k.startswith(PREFIX)}
    model = CAMPPlus()
    load_weights(model, sub, "speaker_encoder", PREFIX)
    return model.eval()
