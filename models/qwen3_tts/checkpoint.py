"""Read an unmodified Hugging Face Qwen3-TTS checkpoint directory.

Layout: ``config.json``, ``generation_config.json`` (optional here),
``model.safetensors`` or sharded ``model-XXXXX-of-YYYYY.safetensors`` with
``model.safetensors.index.json``, the Qwen2 tokenizer files, and
``speech_tokenizer/`` (``config.json`` + safetensors). Every missing file or
tensor raises ``CheckpointError`` naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import nn

from models.qwen3_tts.config import CheckpointError


def read_json(path: Path, required: bool = True) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise CheckpointError(f"checkpoint file missing: {path}")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must hold a JSON object")
    return data


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files of one model directory (single file or shards)."""
    single = directory / "model.safetensors"
    if single.is_file():
        return [single]
    index_path = directory / "model.safetensors.index.json"
    if not index_path.is_file():
        raise CheckpointError(
            f"checkpoint file missing: {single} (or the sharded {index_path.name})"
        )
    weight_map = read_json(index_path).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index_path}: missing key 'weight_map'")
    files = []
    for name in sorted(set(weight_map.values())):
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"checkpoint shard missing: {path} (listed in {index_path.name})")
        files.append(path)
    return files


def load_tensors(directory: Path, prefixes: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """All tensors whose key starts with one of ``prefixes``."""
    tensors: dict[str, torch.Tensor] = {}
    for path in weight_files(directory):
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if key.startswith(prefixes):
                    tensors[key] = handle.get_tensor(key)
    return tensors


def load_module(
    module: nn.Module, tensors: dict[str, torch.Tensor], where: Path, dtype: torch.dtype
) -> None:
    """Copy ``tensors`` into ``module`` (cast to ``dtype``); every module tensor must be there."""
    expected = module.state_dict()
    for key, target in expected.items():
        if key not in tensors:
            raise CheckpointError(f"{where}: missing tensor {key!r}")
        source = tensors[key]
        if tuple(source.shape) != tuple(target.shape):
            raise CheckpointError(
                f"{where}: tensor {key!r} has shape {tuple(source.shape)}, "
                f"the config implies {tuple(target.shape)}"
            )
    module.load_state_dict({k: tensors[k] for k in expected}, strict=True)
    module.to(dtype)
