"""What a checkpoint directory holds, from its config.json and its safetensors headers
(no tensor is read): the architecture and sizes the config declares, and the tensors
grouped by prefix with their shapes, parameter counts and dtypes."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.checkpoint import CheckpointError, TensorInfo, read_header

SIZE_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
    "n_embd",
    "n_layer",
    "n_head",
    "n_positions",
    "n_inner",
    "d_model",
    "num_layers",
    "codebook_size",
    "num_quantizers",
    "sampling_rate",
    "sample_rate",
)
"""config.json keys reported (at any depth) as the model's sizes."""
MAX_DEPTH = 2
"""Folders below the checkpoint searched for weights (``speech_tokenizer/``...)."""
_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")


@dataclass(frozen=True)
class ConfigSummary:
    path: Path
    architectures: tuple[str, ...]
    model_types: tuple[tuple[str, str], ...]
    """``(dotted key, model_type)`` of the config and its nested configs."""
    sizes: tuple[tuple[str, Any], ...]
    """``(dotted key, value)`` of every size key found."""


@dataclass
class Pattern:
    """Tensors whose keys differ only in their layer indices."""

    pattern: str
    """The key with each index replaced by ``*``."""
    count: int = 0
    shapes: set[tuple[int, ...]] = field(default_factory=set)
    dtypes: set[str] = field(default_factory=set)
    params: int = 0


@dataclass
class Group:
    """The tensors under one prefix (up to the first layer index, or two names deep)."""

    prefix: str
    patterns: dict[str, Pattern] = field(default_factory=dict)
    layers: set[str] = field(default_factory=set)
    """Distinct layer indices right after the prefix."""

    @property
    def tensors(self) -> int:
        return sum(p.count for p in self.patterns.values())

    @property
    def params(self) -> int:
        return sum(p.params for p in self.patterns.values())

    @property
    def dtypes(self) -> set[str]:
        return {d for p in self.patterns.values() for d in p.dtypes}


@dataclass(frozen=True)
class WeightFile:
    path: Path
    """Relative to the checkpoint directory."""
    tensors: dict[str, TensorInfo]

    @property
    def params(self) -> int:
        return sum(t.numel for t in self.tensors.values())

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def groups(self) -> list[Group]:
        return group_tensors(self.tensors)


@dataclass(frozen=True)
class Inspection:
    path: Path
    config: ConfigSummary | None
    files: tuple[WeightFile, ...]
    other_files: tuple[str, ...]
    """Files that are neither configs nor weights (tokenizers, voices, ONNX graphs...)."""


def inspect_checkpoint(path: Path) -> Inspection:
    """Read ``path`` (a directory, or one safetensors file)."""
    if path.is_file():
        if path.suffix != ".safetensors":
            raise CheckpointError("not a checkpoint directory or a .safetensors file", path)
        return Inspection(path, None, (WeightFile(Path(path.name), read_header(path)),), ())
    if not path.is_dir():
        raise CheckpointError("no such directory", path)
    files = tuple(WeightFile(p.relative_to(path), read_header(p)) for p in _weight_paths(path))
    config = path / "config.json"
    others = sorted(
        str(p.relative_to(path))
        for p in path.iterdir()
        if p.is_file() and p.suffix not in (".safetensors",) and p.name != "config.json"
    )
    return Inspection(
        path, summarize_config(config) if config.is_file() else None, files, tuple(others)
    )


def _weight_paths(root: Path) -> list[Path]:
    found = []
    for depth in range(MAX_DEPTH + 1):
        pattern = "/".join(["*"] * depth + ["*.safetensors"])
        found += sorted(root.glob(pattern))
    return found


def summarize_config(path: Path) -> ConfigSummary:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"not valid JSON: {exc}", path) from exc
    if not isinstance(data, dict):
        raise CheckpointError("must hold a JSON object", path)
    types: list[tuple[str, str]] = []
    sizes: list[tuple[str, Any]] = []

    def walk(node: dict[str, Any], where: str) -> None:
        if isinstance(node.get("model_type"), str):
            types.append((where or "(top)", node["model_type"]))
        for key, value in node.items():
            dotted = f"{where}.{key}" if where else key
            if isinstance(value, dict):
                walk(value, dotted)
            elif (
                key in SIZE_KEYS and isinstance(value, int | float) and not isinstance(value, bool)
            ):
                sizes.append((dotted, value))

    walk(data, "")
    arch = data.get("architectures") or ()
    return ConfigSummary(
        path,
        tuple(str(a) for a in arch) if isinstance(arch, list) else (),
        tuple(types),
        tuple(sizes),
    )


def group_tensors(tensors: dict[str, TensorInfo]) -> list[Group]:
    """Tensors by prefix: a key's prefix ends before its first layer index (``model.layers.``),
    else after its first two names (``model.norm``); patterns inside replace indices with ``*``."""
    groups: dict[str, Group] = {}
    for key, info in sorted(tensors.items()):
        match = _INDEX.search(key)
        if match is not None:
            prefix = key[: match.start()]
            index = match.group(0)
        else:
            prefix = ".".join(key.split(".")[:2])
            index = None
        group = groups.setdefault(prefix, Group(prefix))
        if index is not None:
            group.layers.add(index)
        pattern = _INDEX.sub("*", key)
        entry = group.patterns.setdefault(pattern, Pattern(pattern))
        entry.count += 1
        entry.shapes.add(info.shape)
        entry.dtypes.add(info.dtype)
        entry.params += info.numel
    return list(groups.values())


def layer_counts(tensors: dict[str, TensorInfo]) -> dict[str, int]:
    """Prefix -> number of distinct indices after it (``model.layers.`` -> 28)."""
    seen: dict[str, set[str]] = defaultdict(set)
    for key in tensors:
        match = _INDEX.search(key)
        if match is not None:
            seen[key[: match.start()]].add(match.group(0))
    return {k: len(v) for k, v in seen.items()}
