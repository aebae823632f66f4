"""Kyutai's Mimi codec: 24 kHz audio <-> 12.5 Hz frames of up to 32 codes (2048 each).

Encode: SEANet encoder (hop 960: 25 Hz latents) -> causal transformer -> stride-2
conv -> split RVQ. Decode: split RVQ sums -> stride-2 depthwise transposed conv ->
causal transformer -> SEANet decoder (1920 samples per frame). Everything is
causal, so decoding streams exactly: :mod:`models.blocks.mimi_stream` keeps each
stream's state in device tables.

The published weights (``tokenizer-e351c8d8-checkpoint125.safetensors`` in
``kyutai/moshiko-pytorch-bf16``, what ``moshi.models.loaders.get_mimi`` reads) are a
flat safetensors file in ``moshi``'s key names (318 tensors) and carry no config:
:func:`config_from_shapes` reads the widths, ratios, layer and codebook counts from
the tensors, and takes what no tensor shows (8 heads, a 250-step attention context,
rotary max period 10000, ELU, dilation base 2, 24 kHz) from Mimi's published config
(``moshi/models/loaders.py``). :func:`load_mimi` checks a file strictly (every
missing, unexpected or misshapen tensor is named) and keeps the halves and
codebooks asked for. Attention weights load under either of moshi's names
(``self_attn.in_proj_weight`` / ``out_proj.weight`` as the published file has them,
or ``in_projs.0.weight`` / ``out_projs.0.weight`` as moshi saves them now).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

from models.blocks.mimi_conv import CausalConv, CausalConvTranspose, SEANetDecoder, SEANetEncoder
from models.blocks.mimi_rvq import SplitRVQ
from models.blocks.mimi_transformer import MimiTransformer
from models.checkpoint import CheckpointError, compare

V = TypeVar("V")

MIMI_FILE = "tokenizer-e351c8d8-checkpoint125.safetensors"
"""The published weights' file name."""


@dataclass(frozen=True)
class MimiConfig:
    """Mimi's hyper-parameters; the defaults are the published model's."""

    sample_rate: int = 24000
    channels: int = 1
    dimension: int = 512
    n_filters: int = 64
    ratios: tuple[int, ...] = (8, 6, 5, 4)
    n_residual_layers: int = 1
    kernel_size: int = 7
    residual_kernel_size: int = 3
    last_kernel_size: int = 3
    dilation_base: int = 2
    compress: int = 2
    resample_stride: int = 2
    """Encoder frames per code frame (25 Hz -> 12.5 Hz)."""
    num_heads: int = 8
    num_layers: int = 8
    dim_feedforward: int = 2048
    context: int = 250
    max_period: float = 10000.0
    codebook_dim: int = 256
    codebook_size: int = 2048
    semantic_codebooks: int = 1
    total_codebooks: int = 32

    @property
    def encoder_hop(self) -> int:
        hop = 1
        for ratio in self.ratios:
            hop *= ratio
        return hop

    @property
    def samples_per_frame(self) -> int:
        return self.encoder_hop * self.resample_stride

    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.samples_per_frame

    def seanet(self) -> dict[str, object]:
        return {
            "dimension": self.dimension,
            "n_filters": self.n_filters,
            "ratios": self.ratios,
            "n_residual_layers": self.n_residual_layers,
            "kernel_size": self.kernel_size,
            "residual_kernel_size": self.residual_kernel_size,
            "last_kernel_size": self.last_kernel_size,
            "dilation_base": self.dilation_base,
            "compress": self.compress,
            "channels": self.channels,
        }

    def transformer(self) -> MimiTransformer:
        return MimiTransformer(
            self.dimension,
            self.num_heads,
            self.num_layers,
            self.dim_feedforward,
            self.context,
            self.max_period,
        )


class Mimi(nn.Module):
    """The codec, or one half of it: ``encoder`` (audio -> codes) and ``decoder`` (codes
    -> audio) parts, with the first ``num_codebooks`` codebooks."""

    def __init__(
        self, cfg: MimiConfig, num_codebooks: int, *, encoder: bool = True, decoder: bool = True
    ) -> None:
        super().__init__()
        if not cfg.semantic_codebooks <= num_codebooks <= cfg.total_codebooks:
            raise ValueError(
                f"num_codebooks must be from {cfg.semantic_codebooks} to "
                f"{cfg.total_codebooks}, got {num_codebooks}"
            )
        if not (encoder or decoder):
            raise ValueError("a Mimi needs its encoder, its decoder or both")
        self.cfg = cfg
        self.num_codebooks = num_codebooks
        self.has_encoder = encoder
        self.has_decoder = decoder
        dim, stride = cfg.dimension, cfg.resample_stride
        if encoder:
            self.encoder = SEANetEncoder(**cfg.seanet())  # type: ignore[arg-type]
            self.encoder_transformer = cfg.transformer()
            self.downsample = _Downsample(
                CausalConv(dim, dim, 2 * stride, stride, bias=False, pad_mode="replicate")
            )
        if decoder:
            self.decoder = SEANetDecoder(**cfg.seanet())  # type: ignore[arg-type]
            self.decoder_transformer = cfg.transformer()
            self.upsample = _Upsample(
                CausalConvTranspose(dim, dim, 2 * stride, stride, groups=dim, bias=False)
            )
        semantic = cfg.semantic_codebooks
        self.quantizer = SplitRVQ(
            semantic, num_codebooks - semantic, cfg.codebook_size, cfg.codebook_dim, dim
        )
        for name, module in self.named_modules():
            if hasattr(module, "state_columns"):
                module.state_key = name  # type: ignore[assignment]

    @property
    def sample_rate(self) -> int:
        return self.cfg.sample_rate

    @property
    def samples_per_frame(self) -> int:
        return self.cfg.samples_per_frame

    @property
    def device(self) -> torch.device:
        return self.quantizer.rvq_first.input_proj.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.quantizer.rvq_first.input_proj.weight.dtype

    @torch.no_grad()
    def encode(self, audio: torch.Tensor) -> torch.Tensor:
        """Audio [B, samples] (or [B, 1, samples]) at 24 kHz -> codes int64
        [B, num_codebooks, frames]; the audio is zero-padded to whole frames first (as
        moshi's ``MimiModel.encode`` does), so frames = ceil(samples / 1920)."""
        if not self.has_encoder:
            raise ValueError("this Mimi was loaded without its encoder")
        if audio.dim() == 2:
            audio = audio[:, None]
        if audio.dim() != 3 or audio.shape[1] != self.cfg.channels:
            raise ValueError(f"audio must be [B, samples] or [B, 1, samples], got {audio.shape}")
        hop = self.samples_per_frame
        pad = -audio.shape[-1] % hop
        x = torch.nn.functional.pad(audio.to(self.device, self.dtype), (0, pad))
        latents = self.encoder_transformer(self.encoder(x))
        return self.quantizer.encode(self.downsample.conv(latents), self.num_codebooks)

    def check_codes(self, codes: torch.Tensor) -> None:
        if codes.dim() != 3 or codes.shape[1] != self.num_codebooks:
            raise ValueError(
                f"codes must be [B, {self.num_codebooks}, frames], got {tuple(codes.shape)}"
            )

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes [B, num_codebooks, frames] -> audio [B, 1, frames * 1920], the whole
        sequence at once (as moshi's ``MimiModel.decode`` outside streaming)."""
        if not self.has_decoder:
            raise ValueError("this Mimi was loaded without its decoder")
        self.check_codes(codes)
        if codes.numel() and (codes.min() < 0 or codes.max() >= self.cfg.codebook_size):
            raise ValueError(f"codes must be in [0, {self.cfg.codebook_size})")
        latents = self.quantizer.decode(codes.to(self.device)).to(self.dtype)
        latents = self.decoder_transformer(self.upsample.convtr(latents))
        return self.decoder(latents)


class _Downsample(nn.Module):
    """``ConvDownsample1d``: the checkpoint's ``downsample.conv`` level."""

    def __init__(self, conv: CausalConv) -> None:
        super().__init__()
        self.conv = conv


class _Upsample(nn.Module):
    """``ConvTrUpsample1d`` (depthwise: moshi's ``upsample_channel_wise_bug``)."""

    def __init__(self, convtr: CausalConvTranspose) -> None:
        super().__init__()
        self.convtr = convtr


# -- the checkpoint ----------------------------------------------------------------

_ALIASES = (
    (
        re.compile(r"\.self_attn\.(?:in_projs\.0\.weight|in_proj\.weight)$"),
        ".self_attn.in_proj_weight",
    ),
    (re.compile(r"\.self_attn\.out_projs\.0\.weight$"), ".self_attn.out_proj.weight"),
)


def canonical_keys(state: Mapping[str, V]) -> dict[str, V]:
    """``state`` with moshi's newer attention names turned into the published file's."""
    out: dict[str, V] = {}
    for key, value in state.items():
        for pattern, name in _ALIASES:
            key = pattern.sub(name, key)
        out[key] = value
    return out


def checkpoint_shapes(cfg: MimiConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a Mimi file of ``cfg`` holds, both halves and every codebook."""
    with torch.device("meta"):
        model = Mimi(cfg, cfg.total_codebooks)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def config_from_shapes(
    shapes: Mapping[str, tuple[int, ...]], file: str = "", base: MimiConfig = MimiConfig()
) -> MimiConfig:
    """The sizes a Mimi file's tensors give; what no tensor shows comes from ``base``
    (the published config). CheckpointError naming a tensor that is not there or
    sizes that do not fit together."""

    def shape(key: str) -> tuple[int, ...]:
        if key not in shapes:
            raise CheckpointError(f"not a Mimi codec: missing tensor '{key}'", file or None)
        return shapes[key]

    def indices(pattern: str) -> list[int]:
        return sorted({int(m.group(1)) for k in shapes if (m := re.fullmatch(pattern, k))})

    def bad(problem: str) -> CheckpointError:
        return CheckpointError(f"not a Mimi codec of the published design: {problem}", file or None)

    convtrs = indices(r"decoder\.model\.(\d+)\.convtr\.convtr\.weight")
    if not convtrs:
        raise bad("no transposed convs in the decoder ('decoder.model.N.convtr.convtr.weight')")
    ratios = []
    for i in convtrs:
        c_in, c_out, kernel = shape(f"decoder.model.{i}.convtr.convtr.weight")
        if kernel % 2 or c_out * 2 != c_in:
            raise bad(f"'decoder.model.{i}.convtr.convtr.weight' is {(c_in, c_out, kernel)}")
        ratios.append(kernel // 2)
    residual_layers = convtrs[1] - convtrs[0] - 2 if len(convtrs) > 1 else 1
    channels, n_filters, last_kernel = shape(
        f"decoder.model.{convtrs[-1] + residual_layers + 2}.conv.conv.weight"
    )
    first_out, dimension, kernel = shape("decoder.model.0.conv.conv.weight")
    if first_out != n_filters * 2 ** len(ratios):
        raise bad(f"'decoder.model.0.conv.conv.weight' has {first_out} outputs")
    res = f"decoder.model.{convtrs[0] + 1}.block"
    hidden, res_in, res_kernel = shape(f"{res}.1.conv.conv.weight")
    upsample = shape("upsample.convtr.convtr.convtr.weight")
    layers = indices(r"decoder_transformer\.transformer\.layers\.(\d+)\.norm1\.weight")
    if not layers:
        raise bad("no decoder transformer layers")
    prefix = "decoder_transformer.transformer.layers.0"
    d_model = shape(f"{prefix}.norm1.weight")[0]
    ffn = shape(f"{prefix}.linear1.weight")[0]
    if d_model != dimension:
        raise bad(f"the transformers are {d_model} wide, the latents {dimension}")
    book = shape("quantizer.rvq_first.vq.layers.0._codebook.embedding_sum")
    semantic = indices(r"quantizer\.rvq_first\.vq\.layers\.(\d+)\._codebook\.embedding_sum")
    acoustic = indices(r"quantizer\.rvq_rest\.vq\.layers\.(\d+)\._codebook\.embedding_sum")
    cfg = MimiConfig(
        sample_rate=base.sample_rate,
        channels=channels,
        dimension=dimension,
        n_filters=n_filters,
        ratios=tuple(ratios),
        n_residual_layers=residual_layers,
        kernel_size=kernel,
        residual_kernel_size=res_kernel,
        last_kernel_size=last_kernel,
        dilation_base=base.dilation_base,
        compress=res_in // hidden,
        resample_stride=upsample[2] // 2,
        num_heads=base.num_heads,
        num_layers=len(layers),
        dim_feedforward=ffn,
        context=base.context,
        max_period=base.max_period,
        codebook_dim=book[1],
        codebook_size=book[0],
        semantic_codebooks=len(semantic),
        total_codebooks=len(semantic) + len(acoustic),
    )
    if d_model % cfg.num_heads or (d_model // cfg.num_heads) % 2:
        raise bad(f"the transformers' width {d_model} does not split into {cfg.num_heads} heads")
    return cfg


def read_mimi_file(path: Path | str) -> dict[str, torch.Tensor]:
    """The tensors of a Mimi safetensors file, keyed as the file spells them."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise CheckpointError("Mimi codec file missing", path)
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"not a readable safetensors file ({exc})", path) from exc


def load_mimi(
    source: Path | str | Mapping[str, torch.Tensor],
    num_codebooks: int,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    encoder: bool = True,
    decoder: bool = True,
    config: MimiConfig | None = None,
    file: str = "",
) -> Mimi:
    """The Mimi of a Kyutai checkpoint (a safetensors path, or its tensors already
    read), with its first ``num_codebooks`` codebooks, the halves asked for, on
    ``device`` in ``dtype``. The whole file is checked (both halves, all codebooks);
    only what is kept is loaded. ``config``: sizes to hold the file to instead of the
    ones its tensors give."""
    if isinstance(source, Mapping):
        state = dict(source)
    else:
        file = file or str(source)
        state = read_mimi_file(source)
    state = canonical_keys(state)
    found = {k: tuple(v.shape) for k, v in state.items()}
    cfg = config or config_from_shapes(found, file)
    if not cfg.semantic_codebooks <= num_codebooks <= cfg.total_codebooks:
        raise CheckpointError(
            f"num_codebooks must be from {cfg.semantic_codebooks} to {cfg.total_codebooks} "
            f"(the file's codebooks), got {num_codebooks}",
            file or None,
        )
    compare(checkpoint_shapes(cfg), found, "Mimi codec", file=file).raise_if_bad()
    with torch.device("meta"):
        model = Mimi(cfg, num_codebooks, encoder=encoder, decoder=decoder)
    kept = {k: state[k].float() for k in model.state_dict()}
    model.load_state_dict(kept, strict=True, assign=True)
    # The codebooks' vectors in float32 (then cast with the rest).
    model.quantizer.refresh()
    return model.to(device=device, dtype=dtype).requires_grad_(False).eval()
