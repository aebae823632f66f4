"""Read an unmodified Hugging Face Qwen3-TTS checkpoint directory.

Layout: ``config.json``, ``generation_config.json`` (optional here),
``model.safetensors`` or sharded ``model-XXXXX-of-YYYYY.safetensors`` with
``model.safetensors.index.json``, the Qwen2 tokenizer files, and
``speech_tokenizer/`` (``config.json`` + safetensors). Every missing file or
tensor raises ``CheckpointError`` naming it (``models.checkpoint``: the error and
the strict check are every family's).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from models.checkpoint import (
    WeightReport,
    compare,
    module_shapes,
    read_headers,
    read_json,
    safetensors_files,
)
from models.checkpoint import load_tensors as _load_tensors

__all__ = [
    "check_weights",
    "load_module",
    "load_tensors",
    "read_json",
    "weight_files",
    "weight_prefixes",
]


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files of one model directory (single file or shards)."""
    return safetensors_files(directory)


def load_tensors(directory: Path, prefixes: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """All tensors whose key starts with one of ``prefixes``."""
    return _load_tensors(weight_files(directory), prefixes)


def load_module(
    module: nn.Module, tensors: dict[str, torch.Tensor], where: Path, dtype: torch.dtype
) -> None:
    """Copy ``tensors`` into ``module`` (cast to ``dtype``), strictly: every tensor the
    module has must be there with its shape and none extra (``tensors`` holds the
    file's keys under the prefixes the module covers)."""
    report = compare(
        module_shapes(module),
        {k: tuple(v.shape) for k, v in tensors.items()},
        type(module).__name__,
        file=str(where),
    )
    report.raise_if_bad()
    module.load_state_dict(tensors, strict=True)
    module.to(dtype)


def weight_prefixes(model_type: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The keys the model reads from ``model.safetensors`` and from
    ``speech_tokenizer/``: a Base (voice clone) model also needs its encoders."""
    if model_type == "base":
        return ("talker.", "speaker_encoder."), ("decoder.", "encoder.")
    return ("talker.",), ("decoder.",)


def check_weights(root: Path) -> list[WeightReport]:
    """The strict check of both weight files against the modules the configs imply,
    from the files' headers and modules built on the meta device (nothing is loaded)."""
    from models.qwen3_tts.config import parse_config, parse_speech_tokenizer_config
    from models.qwen3_tts.modules import Qwen3TTSWeights, SpeechTokenizerWeights

    cfg = parse_config(read_json(root / "config.json"))
    st_dir = root / "speech_tokenizer"
    st_cfg = parse_speech_tokenizer_config(read_json(st_dir / "config.json"))
    prefixes, st_prefixes = weight_prefixes(cfg.model_type)
    with torch.device("meta"):
        model = Qwen3TTSWeights(cfg)
        tokenizer = SpeechTokenizerWeights(st_cfg, with_encoder=cfg.model_type == "base")
    reports = []
    for module, directory, keep, what in (
        (model, root, prefixes, "talker" + (" and speaker encoder" if len(prefixes) > 1 else "")),
        (tokenizer, st_dir, st_prefixes, "speech tokenizer"),
    ):
        files = weight_files(directory)
        header = read_headers(files)
        found = {k: v.shape for k, v in header.items() if k.startswith(keep)}
        names = ", ".join(str(f.relative_to(root)) for f in files)
        reports.append(compare(module_shapes(module), found, what, file=names))
    return reports
