"""Family name -> lazy import strings of its entry points.

Importing a family pulls in heavy dependencies (onnxruntime, torch), so the
server resolves only the family it serves. A new family is one entry here, a
folder in ``models/`` and a YAML in ``configs/``.

Each family may also say which checkpoints are its own (``recognize``: no tensors
read, no torch), check a checkpoint's weights without loading them (``check``), and
what a checkpoint costs on a GPU (``sizing``: its CPU defaults and memory profile).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from models.base import LoadedModel
from models.checkpoint import WeightReport
from models.recognition import Recognized


@dataclass(frozen=True)
class Family:
    """Where a family's entry points are (``module:attribute`` or a module)."""

    load: str
    """``load(options, checkpoint_dir) -> LoadedModel``."""
    recognize: str | None = None
    """Module with ``recognize(path) -> Recognized | None`` and ``LOOKS_FOR``."""
    check: str | None = None
    """``check_weights(path) -> list[WeightReport]``: the strict check, from headers."""
    sizing: str | None = None
    """Module with ``CPU`` (``models.sizing.Sizes``) and ``memory_profile(checkpoint,
    options) -> models.sizing.MemoryProfile``: its ``auto`` settings can be sized."""


FAMILIES: dict[str, Family] = {
    "piper": Family(
        "models.piper.loader:load",
        recognize="models.piper.recognize",
        check="models.piper.checkpoint:check_weights",
    ),
    "tiny": Family("models.tiny.model:load"),
    "qwen3_tts": Family(
        "models.qwen3_tts.loader:load",
        recognize="models.qwen3_tts.recognize",
        check="models.qwen3_tts.checkpoint:check_weights",
        sizing="models.qwen3_tts.sizing",
    ),
    "chatterbox": Family(
        "models.chatterbox.loader:load",
        recognize="models.chatterbox.recognize",
        check="models.chatterbox.checkpoint:check_weights",
        sizing="models.chatterbox.sizing",
    ),
    "fish_speech": Family(
        "models.fish_speech.loader:load",
        recognize="models.fish_speech.recognize",
        check="models.fish_speech.checkpoint:check_weights",
        sizing="models.fish_speech.sizing",
    ),
    "voxtream": Family(
        "models.voxtream.loader:load",
        recognize="models.voxtream.recognize",
        check="models.voxtream.checkpoint:check_weights",
        sizing="models.voxtream.sizing",
    ),
    "voxcpm": Family(
        "models.voxcpm.loader:load",
        recognize="models.voxcpm.recognize",
        check="models.voxcpm.checkpoint:check_weights",
        sizing="models.voxcpm.sizing",
    ),
}
RECOGNITION_ORDER = ("qwen3_tts", "fish_speech", "voxtream", "voxcpm", "chatterbox", "piper")
"""Families asked in turn: the most specific evidence first (a config.json's model_type,
then a file name, then any .onnx voice)."""

Loader = Callable[[Mapping[str, Any], Path | None], LoadedModel]


def family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(
            f"unknown model family {name!r}; known families: {', '.join(sorted(FAMILIES))}"
        ) from None


def _attr(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def resolve(name: str) -> Loader:
    """Return the ``load(options, checkpoint_dir)`` function of family ``name``."""
    return _attr(family(name).load)


def sizing_of(name: str) -> ModuleType | None:
    """The family's sizing module (``CPU``, ``memory_profile``), or None."""
    target = family(name).sizing
    return importlib.import_module(target) if target else None


def check_weights(name: str, checkpoint: Path) -> list[WeightReport] | None:
    """The family's strict weight check of ``checkpoint`` (None: it has none)."""
    target = family(name).check
    return _attr(target)(checkpoint) if target else None


def recognize(checkpoint: Path) -> Recognized | None:
    """Ask each family in turn whether ``checkpoint`` (a directory or file) is its own."""
    for name in RECOGNITION_ORDER:
        found = importlib.import_module(FAMILIES[name].recognize or "").recognize(checkpoint)
        if found is not None:
            return found
    return None


def looks_for() -> list[str]:
    """What each family recognises, for messages."""
    return [
        importlib.import_module(FAMILIES[name].recognize or "").LOOKS_FOR
        for name in RECOGNITION_ORDER
    ]


def detect_config(checkpoint: Path, known: list[str]) -> str:
    """Name of the config (among ``known``) that fits a checkpoint directory or file."""
    found = recognize(checkpoint)
    if found is not None:
        name = found.pick_config(known)
        if name is not None:
            return name
        raise ValueError(
            f"{checkpoint} is a {found.family} checkpoint ({found.why}) but no config "
            f"serves it: configs/{found.config}.yaml is missing; pass --config or run "
            f"voiceserver onboard {checkpoint}"
        )
    raise ValueError(
        f"cannot tell the model family of {checkpoint}: expected "
        + ", ".join(looks_for()[:-1])
        + f" or {looks_for()[-1]}; pass --config, or run voiceserver onboard {checkpoint} "
        "for a report on what it holds"
    )
