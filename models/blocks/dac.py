"""Fish Speech's modded DAC codec: 44.1 kHz audio <-> frames of 10 codes (21.5 Hz).

A causal Descript Audio Codec with transformers in it, as ``fish-speech``'s
``modded_dac.DAC`` builds it (S2 Pro's and OpenAudio S1's ``codec.pth``):

- encoder: a causal conv, four blocks (three dilated residual units, Snake, a
  strided conv that doubles the channels; the last block ends in a 4-layer
  window-limited transformer), Snake, a conv to the latent: audio -> latent at
  ``sample_rate / 512``;
- quantizer (:mod:`models.blocks.dac_rvq`): latent -> semantic + residual codes at
  another quarter of that rate (2048 samples per frame), and back, through an
  8-layer transformer on each side;
- decoder: a causal conv, four upsampling blocks (Snake, transposed conv, three
  dilated residual units), Snake, a conv to one channel, tanh.

Everything is causal. The only part of decoding that looks far back is the
quantizer's ``post_module`` (each of its 8 layers sees 128 frames); the
convolutions after it reach about 10 frames back. :meth:`DAC.decode` takes the
rotary position of each row's first frame, so a window of a longer sequence
decodes at the positions the whole sequence gives it; :meth:`DAC.frames` and
:meth:`DAC.synthesize` split decoding at that point for a streaming decoder that
keeps a long window for the transformer and a short one for the convolutions.

Parameter names are the checkpoint's; :func:`load_dac` checks a checkpoint's
tensors strictly (weight-norm pairs, rotary tables and the derived causal masks
included), folds the weight norm and builds the model at the sizes the tensors
give.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from models.blocks.dac_conv import (
    CausalConv,
    CausalConvTranspose,
    ResidualUnit,
    Snake,
    fold_weight_norm,
    stored_shapes,
)
from models.blocks.dac_rvq import Quantizer
from models.blocks.dac_transformer import DERIVED_BUFFERS, TransformerShape, WindowTransformer
from models.checkpoint import CheckpointError, compare

ENCODER_HEAD_WIDTH = 64
"""The encoder's transformer has ``width // 64`` heads (the reference's rule)."""


@dataclass(frozen=True)
class DACConfig:
    """The codec's sizes. Defaults are S2 Pro's published codec (``modded_dac_vq``)."""

    sample_rate: int = 44100
    """Audio samples per second, in and out."""
    encoder_dim: int = 64
    """Channels after the encoder's first conv; each encoder block doubles them."""
    encoder_rates: tuple[int, ...] = (2, 4, 8, 8)
    """Stride of each encoder block (their product: audio samples per latent frame)."""
    encoder_transformer_layers: tuple[int, ...] = (0, 0, 0, 4)
    """Transformer layers at the end of each encoder block."""
    encoder_window: int = 512
    """Latent frames the encoder's transformer attends to (fixed by the reference)."""
    encoder_positions: int = 16384
    """Length of the encoder transformer's stored rotary table."""
    decoder_dim: int = 1536
    """Channels after the decoder's first conv; each decoder block halves them."""
    decoder_rates: tuple[int, ...] = (8, 8, 4, 2)
    """Upsampling of each decoder block (their product: samples per latent frame)."""
    downsample_factors: tuple[int, ...] = (2, 2)
    """Latent frames per code frame, one factor per down/upsampling stage."""
    residual_codebooks: int = 9
    """Codebooks after the semantic one."""
    codebook_size: int = 1024
    """Entries of each residual codebook."""
    semantic_codebook_size: int = 4096
    """Entries of the semantic codebook (code 0 of a frame)."""
    codebook_dim: int = 8
    """Dimensions a codebook lookup is made in (factorized VQ)."""
    quantizer_layers: int = 8
    """Layers of each of the quantizer's transformers (``pre_module``, ``post_module``)."""
    quantizer_heads: int = 16
    quantizer_intermediate: int = 3072
    """Feed-forward width of the quantizer's transformers."""
    quantizer_window: int = 128
    """Code frames one position of the quantizer's transformers attends to."""
    quantizer_positions: int = 4096
    """Length of the quantizer transformers' stored rotary tables."""
    head_dim: int = 64
    """Width of an attention head (every transformer of the codec)."""
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    """RMSNorm epsilon of the transformers."""

    @property
    def latent_dim(self) -> int:
        """Channels of the latent (the encoder's last blocks, the transformers' width)."""
        return self.encoder_dim * 2 ** len(self.encoder_rates)

    @property
    def n_codebooks(self) -> int:
        """Codes per frame: the semantic one, then the residual ones."""
        return 1 + self.residual_codebooks

    @property
    def hop_length(self) -> int:
        """Audio samples per code frame."""
        return math.prod(self.encoder_rates) * math.prod(self.downsample_factors)

    def quantizer_shape(self) -> TransformerShape:
        return TransformerShape(
            dim=self.latent_dim,
            layers=self.quantizer_layers,
            heads=self.quantizer_heads,
            head_dim=self.head_dim,
            intermediate=self.quantizer_intermediate,
            window=self.quantizer_window,
            positions=self.quantizer_positions,
            rope_base=self.rope_base,
            norm_eps=self.norm_eps,
        )

    def encoder_shape(self, dim: int, layers: int) -> TransformerShape:
        return TransformerShape(
            dim=dim,
            layers=layers,
            heads=dim // ENCODER_HEAD_WIDTH,
            head_dim=self.head_dim,
            intermediate=3 * dim,
            window=self.encoder_window,
            positions=self.encoder_positions,
            rope_base=self.rope_base,
            norm_eps=self.norm_eps,
        )


class _Stage(nn.Module):
    """A ``block`` Sequential under its own name (the checkpoint's ``.block.N`` level)."""

    def __init__(self, *layers: nn.Module) -> None:
        super().__init__()
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class Encoder(nn.Module):
    def __init__(self, cfg: DACConfig) -> None:
        super().__init__()
        width = cfg.encoder_dim
        blocks: list[nn.Module] = [CausalConv(1, width, 7)]
        for stride, layers in zip(cfg.encoder_rates, cfg.encoder_transformer_layers, strict=True):
            width *= 2
            half = width // 2
            tail: nn.Module = nn.Identity()
            if layers:
                tail = WindowTransformer(cfg.encoder_shape(width, layers))
            blocks.append(
                _Stage(
                    *(ResidualUnit(half, d) for d in (1, 3, 9)),
                    Snake(half),
                    CausalConv(half, width, 2 * stride, stride=stride),
                    tail,
                )
            )
        blocks += [Snake(width), CausalConv(width, cfg.latent_dim, 3)]
        self.block = nn.Sequential(*blocks)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        return self.block(audio)


class Decoder(nn.Module):
    def __init__(self, cfg: DACConfig) -> None:
        super().__init__()
        width = cfg.decoder_dim
        layers: list[nn.Module] = [CausalConv(cfg.latent_dim, width, 7)]
        for stride in cfg.decoder_rates:
            out = width // 2
            layers.append(
                _Stage(
                    Snake(width),
                    CausalConvTranspose(width, out, 2 * stride, stride),
                    *(ResidualUnit(out, d) for d in (1, 3, 9)),
                )
            )
            width = out
        layers += [Snake(width), CausalConv(width, 1, 7), nn.Tanh()]
        self.model = nn.Sequential(*layers)

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        return self.model(latent)


class DAC(nn.Module):
    """The codec. ``encode``: audio [B, samples] -> codes [B, n_codebooks, T]; ``decode``:
    codes -> audio [B, T * hop_length], in [-1, 1]."""

    def __init__(self, cfg: DACConfig) -> None:
        super().__init__()
        if cfg.hop_length != math.prod(cfg.decoder_rates) * math.prod(cfg.downsample_factors):
            raise ValueError(
                f"decoder rates {cfg.decoder_rates} do not undo encoder rates {cfg.encoder_rates}"
            )
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.quantizer = Quantizer(
            cfg.latent_dim,
            cfg.residual_codebooks,
            cfg.codebook_size,
            cfg.semantic_codebook_size,
            cfg.codebook_dim,
            cfg.downsample_factors,
            cfg.quantizer_shape(),
        )
        self.decoder = Decoder(cfg)

    @property
    def sample_rate(self) -> int:
        return self.cfg.sample_rate

    @property
    def hop_length(self) -> int:
        """Audio samples per frame of codes."""
        return self.cfg.hop_length

    @property
    def n_codebooks(self) -> int:
        return self.cfg.n_codebooks

    @property
    def dtype(self) -> torch.dtype:
        return self.decoder.model[0].conv.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.decoder.model[0].conv.weight.device

    @torch.inference_mode()
    def encode(self, audio: torch.Tensor) -> torch.Tensor:
        """int64 codes [B, n_codebooks, ceil(samples / hop_length)] of ``audio`` [B, samples]
        at :attr:`sample_rate` (zeros pad the last frame)."""
        if audio.dim() != 2:
            raise ValueError(f"audio must be [batch, samples], got shape {tuple(audio.shape)}")
        hop = self.hop_length
        pad = -audio.shape[-1] % hop
        x = nn.functional.pad(audio.to(self.device, self.dtype), (0, pad))
        return self.quantizer.encode(self.encoder(x[:, None])).long()

    def check_codes(self, codes: torch.Tensor) -> None:
        if codes.dim() != 3 or codes.shape[1] != self.n_codebooks:
            raise ValueError(
                f"codes must be [batch, {self.n_codebooks}, frames], got shape {tuple(codes.shape)}"
            )

    @torch.inference_mode()
    def frames(self, codes: torch.Tensor, start: torch.Tensor | None = None) -> torch.Tensor:
        """codes [B, n_codebooks, T] -> the quantizer's transformed frames [B, latent, T],
        the input of :meth:`synthesize`. ``start``: int64 [B] on the host, the position of
        each row's first frame in its sequence (all 0 when None)."""
        self.check_codes(codes)
        return self.quantizer.frames(codes.to(self.device), start)

    @torch.inference_mode()
    def synthesize(self, frames: torch.Tensor) -> torch.Tensor:
        """:meth:`frames`' output [B, latent, T] -> audio [B, T * hop_length] (causal: a
        sample depends on frames up to its own, about 10 back)."""
        return self.decoder(self.quantizer.upsample(frames))[:, 0]

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor, start: torch.Tensor | None = None) -> torch.Tensor:
        """Audio [B, T * hop_length] of codes [B, n_codebooks, T]."""
        return self.synthesize(self.frames(codes, start))


def transformers(model: nn.Module) -> dict[str, WindowTransformer]:
    return {n: m for n, m in model.named_modules() if isinstance(m, WindowTransformer)}


def checkpoint_shapes(model: DAC) -> dict[str, tuple[int, ...]]:
    """Every key (and shape) a checkpoint of ``model``'s sizes holds: its tensors with
    weight norm as stored, and the derived causal masks."""
    shapes = stored_shapes(model)
    for name, module in transformers(model).items():
        size = module.shape.positions
        shapes.update({f"{name}.{buf}": (size, size) for buf in DERIVED_BUFFERS})
    return shapes


def load_dac(
    state: Mapping[str, torch.Tensor], *, file: str = "", config: DACConfig | None = None
) -> DAC:
    """The codec holding ``state`` (a checkpoint's tensors, keys as stored), its sizes
    read from the tensors unless ``config`` is given; CheckpointError naming what is
    missing, unexpected or misshapen. On CPU in the tensors' dtype (float32): move it
    with ``.to``."""
    found = {k: tuple(v.shape) for k, v in state.items()}
    cfg = config or config_from_shapes(found, file)
    with torch.device("meta"):
        model = DAC(cfg)
    compare(checkpoint_shapes(model), found, "DAC codec", file=file).raise_if_bad()
    derived = tuple(f".{buf}" for buf in DERIVED_BUFFERS)
    kept = {k: v for k, v in state.items() if not k.endswith(derived)}
    model.load_state_dict(fold_weight_norm(model, kept), strict=True, assign=True)
    return model.requires_grad_(False).eval()


_WN_WEIGHT = ".conv.parametrizations.weight.original1"


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], file: str = "") -> DACConfig:
    """The sizes a checkpoint's tensors give (the attention windows, which no tensor
    shows, are S2 Pro's); CheckpointError naming a tensor that is not there."""

    def shape(key: str) -> tuple[int, ...]:
        if key not in shapes:
            raise CheckpointError(f"not a modded DAC codec: missing tensor '{key}'", file or None)
        return shapes[key]

    def count(pattern: str) -> int:
        found = {m.group(1) for k in shapes if (m := re.fullmatch(pattern, k))}
        return len(found)

    stages = count(r"encoder\.block\.(\d+)\.block\.4" + re.escape(_WN_WEIGHT))
    encoder_rates = tuple(
        shape(f"encoder.block.{i}.block.4{_WN_WEIGHT}")[2] // 2 for i in range(1, stages + 1)
    )
    layers = tuple(
        count(rf"encoder\.block\.{i}\.block\.5\.layers\.(\d+)\..*") for i in range(1, stages + 1)
    )
    encoder_positions = DACConfig.encoder_positions
    for i, n in enumerate(layers, start=1):
        if n:
            encoder_positions = shape(f"encoder.block.{i}.block.5.freqs_cis")[0]
    decoder_stages = count(r"decoder\.model\.(\d+)\.block\.1" + re.escape(_WN_WEIGHT))
    decoder_rates = tuple(
        shape(f"decoder.model.{i}.block.1{_WN_WEIGHT}")[2] // 2
        for i in range(1, decoder_stages + 1)
    )
    factors = tuple(
        shape(f"quantizer.downsample.{i}.0.conv.weight")[2]
        for i in range(count(r"quantizer\.downsample\.(\d+)\.0\.conv\.weight"))
    )
    post = "quantizer.post_module"
    rope = shape(f"{post}.freqs_cis")
    head_dim = 2 * rope[1]
    book = shape("quantizer.quantizer.quantizers.0.codebook.weight")
    return DACConfig(
        encoder_dim=shape(f"encoder.block.0{_WN_WEIGHT}")[0],
        encoder_rates=encoder_rates,
        encoder_transformer_layers=layers,
        encoder_positions=encoder_positions,
        decoder_dim=shape(f"decoder.model.0{_WN_WEIGHT}")[0],
        decoder_rates=decoder_rates,
        downsample_factors=factors,
        residual_codebooks=count(r"quantizer\.quantizer\.quantizers\.(\d+)\.codebook\.weight"),
        codebook_size=book[0],
        semantic_codebook_size=shape("quantizer.semantic_quantizer.quantizers.0.codebook.weight")[
            0
        ],
        codebook_dim=book[1],
        quantizer_layers=count(re.escape(post) + r"\.layers\.(\d+)\..*"),
        quantizer_heads=shape(f"{post}.layers.0.attention.wqkv.weight")[0] // (3 * head_dim),
        quantizer_intermediate=shape(f"{post}.layers.0.feed_forward.w1.weight")[0],
        quantizer_positions=rope[0],
        head_dim=head_dim,
    )
