"""ReDimNet (IDRnD, Interspeech 2024): a speaker encoder, 16 kHz audio -> an embedding.

The network of IDRnD's ``ReDimNetWrap``, built from the ``model_config`` its
published ``.pt`` files carry, parameters named as their ``state_dict``:

- ``spec``: the log mel front end, F bins (``redimnet_features``), float32;
- ``backbone.stem``: a 3x3 convolution from 1 to C channels on [B, 1, F, T], a
  channels-first layer norm, then the 1-D view [B, F*C, T];
- ``backbone.stageN``: a softmax mix of the stem's and all earlier stages' outputs
  (``LayerMix``), the 2-D view, a (stride x 1) convolution that trades frequency for
  channels (``c *= stride``, ``f //= stride``; the volume ``F*C`` is kept, times the
  stage's expansion), the stage's 2-D blocks (``redimnet_blocks2d``), a 3x3 grouped
  convolution + batch norm + activation + 1x1 convolution back to ``c`` where the
  stage expanded, the 1-D view again, and optionally a time-context block on it
  (``redimnet_context``, ``F*C // att_block_red`` wide);
- ``backbone.fin_wght1d``: the mix of all outputs; ``backbone.mfa``: a 1x1
  convolution to ``out_channels`` with a batch norm (only when set);
- ``pool``: attentive statistics pooling (``redimnet_pooling``); ``bn``: batch norm
  of the pooled vector; ``linear``: to ``embed_dim``; ``bn2``: a batch norm of the
  embedding (only with ``emb_bn``).

Batch norms use their running statistics (inference only); dropout and SpecAugment
are training-only and absent. Config values the network cannot run with (a class
head, the TensorFlow-layout variant, other features or poolings) are refused with a
``ValueError`` naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from models.blocks.redimnet_blocks2d import BLOCK_2D_TYPES, Block2d
from models.blocks.redimnet_context import BLOCK_1D_TYPES, TimeContextBlock
from models.blocks.redimnet_features import SPEC_NORMS, MelConfig, MelFrontEnd
from models.blocks.redimnet_layers import (
    ChannelsFirstLayerNorm,
    LayerMix,
    ToGrid,
    ToRows,
    groups_for,
)
from models.blocks.redimnet_pooling import AttentiveStatsPool

SQUEEZE_BN_EPS = 1e-6
STRIDES = (1, 2, 3)


@dataclass(frozen=True)
class Stage:
    """One entry of ``stages_setup``: ``(stride, num_blocks, conv_exp, kernel_sizes,
    att_block_red)``; the kernel sizes are not used by the network (every 2-D block
    is 3x3)."""

    stride: int
    blocks: int
    expansion: int = 1
    kernels: tuple[Any, ...] = ((3, 3),)
    context_reduction: int | None = None
    """``att_block_red``: the time-context block is ``F*C // this`` wide (None: no block)."""

    def as_setup(self) -> tuple[Any, ...]:
        kernels = [tuple(k) if isinstance(k, list | tuple) else k for k in self.kernels]
        return (self.stride, self.blocks, self.expansion, kernels, self.context_reduction)


M_STAGES = (
    Stage(1, 2, 1, ((3, 3),), 12),
    Stage(2, 2, 1, ((3, 3),), 12),
    Stage(1, 3, 1, ((3, 3),), 12),
    Stage(2, 4, 1, ((3, 3),), 8),
    Stage(1, 4, 1, ((3, 3),), 8),
    Stage(2, 4, 1, ((3, 3),), 4),
)
"""``ReDimNetWrap``'s default stages, which its code labels the M setup."""


@dataclass(frozen=True)
class ReDimNetConfig:
    """The network's sizes; field defaults are ``ReDimNetWrap``'s."""

    freqs: int = 72
    """``F``: mel bins, the frequency rows of the stem."""
    channels: int = 16
    """``C``: the stem's channels."""
    block_1d: str = "att"
    block_2d: str = "convnext_like"
    stages: tuple[Stage, ...] = M_STAGES
    group_divisor: int | None = 4
    out_channels: int | None = None
    embed_dim: int = 192
    global_context: bool = False
    emb_bn: bool = False
    hop_length: int = 160
    spec_params: Mapping[str, Any] = field(default_factory=dict)
    """``MelBanks`` settings beyond ``n_mels`` and ``hop_length`` (as the config holds them)."""

    @property
    def width(self) -> int:
        """Rows of the 1-D view (``F * C``), the same in every stage."""
        return self.freqs * self.channels

    @property
    def mel(self) -> MelConfig:
        return _mel_config(self.freqs, self.hop_length, self.spec_params)

    def model_config(self) -> dict[str, Any]:
        """The ``model_config`` dict ``ReDimNetWrap(**model_config)`` takes for this network."""
        return {
            "F": self.freqs,
            "C": self.channels,
            "block_1d_type": self.block_1d,
            "block_2d_type": self.block_2d,
            "stages_setup": [stage.as_setup() for stage in self.stages],
            "group_divisor": self.group_divisor,
            "out_channels": self.out_channels,
            "embed_dim": self.embed_dim,
            "num_classes": None,
            "hop_length": self.hop_length,
            "pooling_func": "ASTP",
            "feat_type": "pt",
            "global_context_att": self.global_context,
            "emb_bn": self.emb_bn,
            "spec_params": dict(self.spec_params),
        }

    @classmethod
    def from_model_config(cls, config: Mapping[str, Any]) -> ReDimNetConfig:
        """The network a checkpoint's ``model_config`` describes; ``ValueError`` naming
        the key for one this network cannot run (or ``ReDimNetWrap`` would not take)."""
        return _parse(cls, config)


# -- the model_config of a checkpoint ------------------------------------------------

_WRAP_KEYS = {
    "F", "C", "block_1d_type", "block_2d_type", "stages_setup", "group_divisor",
    "out_channels", "embed_dim", "num_classes", "class_dropout", "feat_agg_dropout",
    "head_activation", "hop_length", "pooling_func", "feat_type", "global_context_att",
    "emb_bn", "spec_params", "return_all_outputs", "tf_optimized_arch",
}  # fmt: skip
_TRAINING_ONLY = {"class_dropout", "feat_agg_dropout", "head_activation"}
_MEL_KEYS = {
    "sample_rate": "sample_rate", "n_fft": "n_fft", "win_length": "win_length",
    "f_min": "f_min", "f_max": "f_max", "norm_signal": "norm_signal",
    "do_preemph": "preemphasis", "spec_norm": "spec_norm",
}  # fmt: skip
"""``MelBanks`` settings (config name -> ``MelConfig`` field)."""
_SPEC_AUGMENT = {
    "do_spec_aug", "freq_start_bin", "num_apply_spec_aug", "freq_mask_width", "time_mask_width"
}  # fmt: skip


def _bad(key: str, problem: str) -> ValueError:
    return ValueError(f"model_config {key!r}: {problem}")


def _int(config: Mapping[str, Any], key: str, default: Any, optional: bool = False) -> Any:
    value = config.get(key, default)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        allowed = "a positive integer" + (" or null" if optional else "")
        raise _bad(key, f"must be {allowed}, got {value!r}")
    return value


def _flag(config: Mapping[str, Any], key: str, default: bool) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise _bad(key, f"must be true or false, got {value!r}")
    return value


def _choice(config: Mapping[str, Any], key: str, default: str, allowed: Sequence[str]) -> str:
    value = config.get(key, default)
    if value not in allowed:
        raise _bad(key, f"must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


def _stages(value: Any, freqs: int) -> tuple[Stage, ...]:
    key = "stages_setup"
    if not isinstance(value, list | tuple) or not value:
        raise _bad(key, f"must be a non-empty list of stages, got {value!r}")
    stages = []
    for i, entry in enumerate(value):
        where = f"{key}[{i}]"
        if not isinstance(entry, list | tuple) or len(entry) != 5:
            raise _bad(where, f"must be (stride, num_blocks, conv_exp, kernel_sizes, "
                       f"att_block_red), got {entry!r}")  # fmt: skip
        stride, blocks, expansion, kernels, reduction = entry
        fields = {"stride": stride, "num_blocks": blocks, "conv_exp": expansion}
        for name, number in fields.items():
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise _bad(where, f"{name} must be a non-negative integer, got {number!r}")
        if stride not in STRIDES:
            raise _bad(where, f"stride must be one of {STRIDES}, got {stride}")
        if expansion < 1:
            raise _bad(where, f"conv_exp must be at least 1, got {expansion}")
        if reduction is not None and (
            isinstance(reduction, bool) or not isinstance(reduction, int) or reduction < 1
        ):
            raise _bad(
                where, f"att_block_red must be a positive integer or null, got {reduction!r}"
            )
        if freqs % stride:
            raise _bad(where, f"stride {stride} does not divide the {freqs} frequency rows left")
        freqs //= stride
        kernel_list = tuple(kernels) if isinstance(kernels, list | tuple) else (kernels,)
        stages.append(Stage(stride, blocks, expansion, kernel_list, reduction))
    return tuple(stages)


def _mel_config(n_mels: int, hop_length: int, spec_params: Mapping[str, Any]) -> MelConfig:
    values: dict[str, Any] = {"n_mels": n_mels, "hop_length": hop_length}
    for key, value in spec_params.items():
        if key in _MEL_KEYS:
            values[_MEL_KEYS[key]] = value
    return MelConfig(**values)


def _spec_params(value: Any) -> dict[str, Any]:
    key = "spec_params"
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _bad(key, f"must be a mapping of MelBanks settings, got {value!r}")
    for name, setting in value.items():
        if name in ("n_mels", "hop_length"):
            raise _bad(f"{key}.{name}", "is set by F / hop_length (MelBanks would get it twice)")
        if name not in _MEL_KEYS and name not in _SPEC_AUGMENT:
            known = ", ".join(sorted({*_MEL_KEYS, *_SPEC_AUGMENT}))
            raise _bad(f"{key}.{name}", f"unknown MelBanks setting (known: {known})")
        if name == "spec_norm" and setting not in SPEC_NORMS:
            raise _bad(f"{key}.{name}", f"must be one of {SPEC_NORMS}, got {setting!r}")
        if name in ("norm_signal", "do_preemph") and not isinstance(setting, bool):
            raise _bad(f"{key}.{name}", f"must be true or false, got {setting!r}")
        if name in ("sample_rate", "n_fft", "win_length") and (
            isinstance(setting, bool) or not isinstance(setting, int) or setting < 1
        ):
            raise _bad(f"{key}.{name}", f"must be a positive integer, got {setting!r}")
        if name in ("f_min", "f_max") and (
            isinstance(setting, bool) or not isinstance(setting, int | float)
        ):
            raise _bad(f"{key}.{name}", f"must be a number, got {setting!r}")
    return dict(value)


def _parse(cls: type[ReDimNetConfig], config: Mapping[str, Any]) -> ReDimNetConfig:
    if not isinstance(config, Mapping):
        raise ValueError(f"model_config must be a mapping, got {type(config).__name__}")
    unknown = sorted(str(k) for k in config if k not in _WRAP_KEYS)
    if unknown:
        raise _bad(
            unknown[0], f"not a ReDimNetWrap setting (known: {', '.join(sorted(_WRAP_KEYS))})"
        )
    _choice(config, "feat_type", "pt", ("pt", "pt_mel"))
    _choice(config, "pooling_func", "ASTP", ("ASTP",))
    if config.get("num_classes") is not None:
        raise _bad("num_classes", "a class head makes the output class scores, not an embedding")
    for key in ("tf_optimized_arch", "return_all_outputs"):
        if _flag(config, key, False):
            raise _bad(key, "must be false for a speaker encoder")
    freqs = _int(config, "F", 72)
    out = cls(
        freqs=freqs,
        channels=_int(config, "C", 16),
        block_1d=_choice(config, "block_1d_type", "att", BLOCK_1D_TYPES),
        block_2d=_choice(config, "block_2d_type", "convnext_like", BLOCK_2D_TYPES),
        stages=_stages(config.get("stages_setup", [s.as_setup() for s in M_STAGES]), freqs),
        group_divisor=_int(config, "group_divisor", 4, optional=True),
        out_channels=_int(config, "out_channels", None, optional=True),
        embed_dim=_int(config, "embed_dim", 192),
        global_context=_flag(config, "global_context_att", False),
        emb_bn=_flag(config, "emb_bn", False),
        hop_length=_int(config, "hop_length", 160),
        spec_params=_spec_params(config.get("spec_params", {"do_spec_aug": False})),
    )
    out.mel  # noqa: B018 (the mel settings must make a MelConfig)
    return out


# -- the network -----------------------------------------------------------------------


def _uses_relu(cfg: ReDimNetConfig) -> bool:
    """The expansion squeeze's activation is a ReLU only when both block kinds are ReLU ones."""
    return "relu" in cfg.block_1d and "relu" in cfg.block_2d


class Backbone(nn.Module):
    """Features [B, 1, F, T] -> frame features [B, rows, T] (rows: ``out_channels``,
    else ``F*C``)."""

    def __init__(self, cfg: ReDimNetConfig) -> None:
        super().__init__()
        width, c, f = cfg.width, cfg.channels, cfg.freqs
        self.num_stages = len(cfg.stages)
        self.stem = nn.Sequential(
            nn.Conv2d(1, c, kernel_size=3, padding="same"), ChannelsFirstLayerNorm(c), ToRows()
        )
        for i, stage in enumerate(cfg.stages):
            inputs = i + 1
            layers: list[nn.Module] = [
                LayerMix(inputs, width if inputs > 1 else 1),
                ToGrid(f, c),
                nn.Conv2d(
                    c, stage.stride * c * stage.expansion, (stage.stride, 1), (stage.stride, 1)
                ),
            ]
            c, f = c * stage.stride, f // stage.stride
            wide = c * stage.expansion
            layers += [
                Block2d(cfg.block_2d, wide, f, cfg.group_divisor) for _ in range(stage.blocks)
            ]
            if stage.expansion != 1:
                layers.append(
                    nn.Sequential(
                        nn.Conv2d(
                            wide, c, 3, padding="same", groups=groups_for(c, cfg.group_divisor)
                        ),
                        nn.BatchNorm2d(c, eps=SQUEEZE_BN_EPS),
                        nn.ReLU() if _uses_relu(cfg) else nn.GELU(),
                        nn.Conv2d(c, c, 1),
                    )
                )
            layers.append(ToRows())
            if stage.context_reduction is not None:
                hidden = width // stage.context_reduction
                layers.append(TimeContextBlock(width, hidden, cfg.block_1d))
            self.add_module(f"stage{i}", nn.Sequential(*layers))
        self.fin_wght1d = LayerMix(self.num_stages + 1, width)
        if cfg.out_channels is not None:
            self.mfa: nn.Module = nn.Sequential(
                nn.Conv1d(width, cfg.out_channels, kernel_size=1, padding="same"),
                nn.BatchNorm1d(cfg.out_channels),
            )
        else:
            self.mfa = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs = [self.stem(x)]
        for i in range(self.num_stages):
            outputs.append(self.get_submodule(f"stage{i}")(outputs))
        return self.mfa(self.fin_wght1d(outputs))


class ReDimNet(nn.Module):
    """16 kHz audio [B, samples] -> speaker embeddings [B, embed_dim] (not normalised).

    The front end runs in float32 and hands the backbone features in the audio's
    dtype; ``bn`` and ``linear`` get their inputs in their own dtypes (a caller may
    keep ``spec`` and ``bn`` in float32 while the rest is bfloat16, as VoXtream does)."""

    def __init__(self, cfg: ReDimNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.backbone = Backbone(cfg)
        self.spec = MelFrontEnd(cfg.mel)
        self.pool = AttentiveStatsPool(cfg.out_channels or cfg.width, cfg.global_context)
        self.bn = nn.BatchNorm1d(self.pool.out_dim)
        self.linear = nn.Linear(self.pool.out_dim, cfg.embed_dim)
        if cfg.emb_bn:
            self.bn2 = nn.BatchNorm1d(cfg.embed_dim)

    @property
    def sample_rate(self) -> int:
        return self.cfg.mel.sample_rate

    @property
    def min_samples(self) -> int:
        return self.cfg.mel.min_samples

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        feats = self.spec(wav).to(wav.dtype)
        pooled = self.pool(self.backbone(feats.unsqueeze(1)))
        x = self.bn(pooled.to(self.bn.weight.dtype))
        x = self.linear(x.to(self.linear.weight.dtype))
        if self.cfg.emb_bn:
            x = self.bn2(x)
        return x
