"""VoxCPM2's AudioVAE: 16 kHz audio -> latents (25 a second) -> 48 kHz audio, fully causal.

The encoder (:class:`AudioVAEEncoder`, for voice prompts): a conv (k7) to ``encoder_dim``
channels, one block per rate (three depthwise residual units, Snake, a strided causal conv
doubling the channels), and ``fc_mu`` (k3); the input is zero-padded on the right to
whole latents, and the latents are the mean (no sampling).

A DAC-lineage decoder built from the kit's causal convolutions (``models.blocks.
dac_conv``): a depthwise conv (k7) and a 1x1 conv up to ``decoder_dim`` channels; one
block per rate (the input scaled and shifted by the output rate's bucket, Snake, a
causal transposed conv halving the channels, three depthwise residual units with
dilations 1, 3, 9); Snake, a conv to one channel (k7), tanh. Every conv is causal, so
a window of latents decodes the same audio as the whole sequence once it reaches back
:data:`LEFT_CONTEXT` latents (its receptive field, ~20).

Weights load strictly from the release's ``audiovae.pth`` (``{"state_dict": ...}``,
legacy weight norm: ``weight_g``/``weight_v``, folded at load); the encoder half is
checked, not loaded. The rate conditioning is folded too: the decoder always renders at
``out_sample_rate``, whose bucket picks one scale and one bias per block.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from models.blocks.dac_conv import (
    LEGACY,
    CausalConv,
    CausalConvTranspose,
    ResidualUnit,
    Snake,
    fold_weight_norm,
    stored_shapes,
)
from models.checkpoint import CheckpointError, compare

VAE_FILE = "audiovae.pth"
VAE_SAFETENSORS = "audiovae.safetensors"
LEFT_CONTEXT = 24
"""Latents before a window that make its audio the whole sequence's (the decoder's
receptive field is ~20: the first k7 conv 6, the first block's residual units ~10, the
transposed convs one each, the later blocks ~2)."""


@dataclass(frozen=True)
class AudioVAEConfig:
    latent_dim: int = 64
    decoder_dim: int = 2048
    decoder_rates: tuple[int, ...] = (8, 6, 5, 2, 2, 2)
    sr_bin_boundaries: tuple[int, ...] = (20000, 30000, 40000)
    out_sample_rate: int = 48000
    encoder_dim: int = 128
    encoder_rates: tuple[int, ...] = (2, 5, 8, 8)
    sample_rate: int = 16000

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> AudioVAEConfig:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        for key in ("decoder_rates", "sr_bin_boundaries", "encoder_rates"):
            if key in known:
                known[key] = tuple(known[key])  # type: ignore[arg-type]
        for key in ("depthwise", "use_noise_block", "cond_out_layer"):
            want = key == "depthwise"
            if data.get(key, want) != want:
                raise CheckpointError(f"audio_vae_config.{key} other than {want} is not supported")
        if data.get("cond_type", "scale_bias") != "scale_bias":
            raise CheckpointError(
                "audio_vae_config.cond_type other than scale_bias is not supported"
            )
        return cls(**known)  # type: ignore[arg-type]

    @property
    def samples_per_latent(self) -> int:
        return math.prod(self.decoder_rates)


class _Block(nn.Module):
    """Snake -> causal transposed conv (x ``stride``, channels halved) -> 3 residual units."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.block = nn.Sequential(
            Snake(c_in),
            CausalConvTranspose(c_in, c_out, 2 * stride, stride, style=LEGACY),
            *(ResidualUnit(c_out, d, groups=c_out, style=LEGACY) for d in (1, 3, 9)),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class AudioVAEDecoder(nn.Module):
    def __init__(self, cfg: AudioVAEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, c = cfg.latent_dim, cfg.decoder_dim
        layers: list[nn.Module] = [
            CausalConv(d, d, 7, groups=d, style=LEGACY),
            CausalConv(d, c, 1, style=LEGACY),
        ]
        for i, stride in enumerate(cfg.decoder_rates):
            layers.append(_Block(c // 2**i, c // 2 ** (i + 1), stride))
        out = c // 2 ** len(cfg.decoder_rates)
        layers += [Snake(out), CausalConv(out, 1, 7, style=LEGACY), nn.Tanh()]
        self.model = nn.ModuleList(layers)
        blocks = len(cfg.decoder_rates)
        widths = [c // 2**i for i in range(blocks)]
        self.scales = nn.ParameterList(nn.Parameter(torch.ones(1, w, 1)) for w in widths)
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(1, w, 1)) for w in widths)

    def forward(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents [B, latent_dim, T] -> audio [B, 1, T * samples_per_latent]."""
        x = latents
        block = 0
        for layer in self.model:
            if isinstance(layer, _Block):
                x = x * self.scales[block] + self.biases[block]
                block += 1
            x = layer(x)
        return x


class _EncoderBlock(nn.Module):
    """3 depthwise residual units -> Snake -> strided causal conv (k = 2 x stride)."""

    def __init__(self, c_in: int, stride: int) -> None:
        super().__init__()
        self.block = nn.Sequential(
            *(ResidualUnit(c_in, d, groups=c_in, style=LEGACY) for d in (1, 3, 9)),
            Snake(c_in),
            CausalConv(c_in, 2 * c_in, 2 * stride, stride=stride, style=LEGACY),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class AudioVAEEncoder(nn.Module):
    def __init__(self, cfg: AudioVAEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        width = cfg.encoder_dim
        layers: list[nn.Module] = [CausalConv(1, width, 7, style=LEGACY)]
        for stride in cfg.encoder_rates:
            layers.append(_EncoderBlock(width, stride))
            width *= 2
        self.block = nn.Sequential(*layers)
        self.fc_mu = CausalConv(width, cfg.latent_dim, 3, style=LEGACY)

    @property
    def hop(self) -> int:
        return math.prod(self.cfg.encoder_rates)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """Audio [B, samples] at ``sample_rate`` -> latents [B, latent_dim, ceil(samples /
        hop)] (right-padded with zeros to whole latents first)."""
        pad = -audio.shape[-1] % self.hop
        x = nn.functional.pad(audio, (0, pad))[:, None]
        return self.fc_mu(self.block(x))


def load_audiovae_encoder(
    path: Path | str,
    cfg: AudioVAEConfig,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> AudioVAEEncoder:
    """The encoder of the release's ``audiovae.pth``, strictly (``encoder.fc_logvar`` is
    in the file and unused: the prompt's latents are the mean)."""
    state = _read(Path(path))
    encoder = AudioVAEEncoder(cfg)
    found = {k[len("encoder.") :]: v for k, v in state.items() if k.startswith("encoder.")}
    expected = {k.replace(".conv.", "."): v for k, v in stored_shapes(encoder).items()}
    logvar = {k: v for k, v in expected.items() if k.startswith("fc_mu.")}
    expected.update({k.replace("fc_mu.", "fc_logvar."): v for k, v in logvar.items()})
    shapes = {k: tuple(v.shape) for k, v in found.items()}
    compare(expected, shapes, "AudioVAE encoder", file=VAE_FILE, prefix="encoder.").raise_if_bad()
    convs = set(_conv_paths(encoder))
    renamed: dict[str, torch.Tensor] = {}
    for key, value in found.items():
        if key.startswith("fc_logvar."):
            continue
        where, _, name = key.rpartition(".")
        renamed[f"{where}.conv.{name}" if where in convs else key] = value
    state = {k: v.float() for k, v in fold_weight_norm(encoder, renamed).items()}
    encoder.load_state_dict(state, strict=True)
    return encoder.to(device=device, dtype=dtype).eval().requires_grad_(False)


def vae_file(directory: Path) -> Path:
    """The AudioVAE's file in a checkpoint directory: ``audiovae.safetensors`` when it is
    there (the reference prefers it), else ``audiovae.pth``."""
    tensors = Path(directory) / VAE_SAFETENSORS
    return tensors if tensors.is_file() else Path(directory) / VAE_FILE


def _read(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of an ``audiovae.pth`` (``{"state_dict": ...}`` or a bare state) or an
    ``audiovae.safetensors``."""
    if not path.is_file():
        raise CheckpointError(f"{VAE_FILE} is missing (the AudioVAE)", path.parent)
    if path.suffix == ".safetensors":
        from models.checkpoint import load_tensors

        return load_tensors([path])
    try:
        data = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file
        raise CheckpointError(f"not a readable torch file ({exc})", path) from exc
    state = data.get("state_dict", data) if isinstance(data, dict) else None
    if not isinstance(state, dict):
        raise CheckpointError("expected a dict of tensors (or {'state_dict': ...})", path)
    return state


def _bucket(cfg: AudioVAEConfig) -> int:
    """``torch.bucketize(out_sample_rate, boundaries)`` (right=False)."""
    return sum(1 for b in cfg.sr_bin_boundaries if cfg.out_sample_rate > b)


def load_audiovae_decoder(
    path: Path | str,
    cfg: AudioVAEConfig,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> AudioVAEDecoder:
    """The decoder of the release's ``audiovae.pth``, strictly: every ``decoder.*`` tensor
    the config implies (rate embeddings included) and nothing else under ``decoder.``."""
    state = _read(Path(path))
    decoder = AudioVAEDecoder(cfg)
    found = {k[len("decoder.") :]: v for k, v in state.items() if k.startswith("decoder.")}
    expected = decoder_keys(decoder)
    shapes = {k: tuple(v.shape) for k, v in found.items()}
    compare(expected, shapes, "AudioVAE decoder", file=VAE_FILE, prefix="decoder.").raise_if_bad()
    ours = _renamed(decoder, found)
    bucket = _bucket(cfg)
    blocks = [i for i, m in enumerate(decoder.model) if isinstance(m, _Block)]
    for n, i in enumerate(blocks):
        ours[f"scales.{n}"] = found[f"sr_cond_model.{i}.scale_embed.weight"][bucket][None, :, None]
        ours[f"biases.{n}"] = found[f"sr_cond_model.{i}.bias_embed.weight"][bucket][None, :, None]
    decoder.load_state_dict({k: v.float() for k, v in ours.items()}, strict=True)
    return decoder.to(device=device, dtype=dtype).eval().requires_grad_(False)


def _conv_paths(model: nn.Module) -> list[str]:
    return [n[: -len(".conv")] for n, m in model.named_modules() if n.endswith(".conv")]


def decoder_keys(decoder: AudioVAEDecoder) -> dict[str, tuple[int, ...]]:
    """The release's ``decoder.*`` keys and shapes for this config: the reference's conv
    modules are the convs themselves (no ``.conv``), its rate conditioning is one
    embedding per block."""
    ours = stored_shapes(decoder)
    out: dict[str, tuple[int, ...]] = {}
    for key, shape in ours.items():
        if key.startswith(("scales.", "biases.")):
            continue
        out[key.replace(".conv.", ".")] = shape
    buckets = len(decoder.cfg.sr_bin_boundaries) + 1
    for i, module in enumerate(decoder.model):
        if isinstance(module, _Block):
            width = module.block[0].alpha.shape[1]
            out[f"sr_cond_model.{i}.scale_embed.weight"] = (buckets, width)
            out[f"sr_cond_model.{i}.bias_embed.weight"] = (buckets, width)
    out["sr_bin_boundaries"] = (len(decoder.cfg.sr_bin_boundaries),)
    return out


def _renamed(
    decoder: AudioVAEDecoder, found: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """The release's conv tensors under our names (``X.weight_g`` -> ``X.conv.weight_g``),
    weight norm folded."""
    convs = set(_conv_paths(decoder))
    state: dict[str, torch.Tensor] = {}
    for key, value in found.items():
        if key.startswith("sr_") or key == "sr_bin_boundaries":
            continue
        path, _, name = key.rpartition(".")
        state[f"{path}.conv.{name}" if path in convs else key] = value
    return {
        k: v
        for k, v in fold_weight_norm(decoder, state).items()
        if not k.startswith(("scales.", "biases."))
    }


def decode_windows(
    decoder: AudioVAEDecoder, windows: Sequence[torch.Tensor], lefts: Sequence[int]
) -> list[torch.Tensor]:
    """Each window [latent_dim, n] decoded, the audio of its first ``lefts[i]`` latents
    (left context) dropped; windows batched, right-padded (causal: padding changes
    nothing before it)."""
    hop = decoder.cfg.samples_per_latent
    longest = max(w.shape[-1] for w in windows)
    batch = windows[0].new_zeros(len(windows), windows[0].shape[0], longest)
    for i, w in enumerate(windows):
        batch[i, :, : w.shape[-1]] = w
    audio = decoder(batch)[:, 0]
    return [audio[i, lefts[i] * hop : w.shape[-1] * hop] for i, w in enumerate(windows)]
