"""Family name -> lazy import string of its ``load`` entry point.

Importing a family pulls in heavy dependencies (onnxruntime, torch), so the
server resolves only the family it serves. A new family is one line here, a
folder in ``models/`` and a YAML in ``configs/``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from models.base import LoadedModel

FAMILIES: dict[str, str] = {
    "piper": "models.piper.loader:load",
    "tiny": "models.tiny.model:load",
    "qwen3_tts": "models.qwen3_tts.loader:load",
    "chatterbox": "models.chatterbox.loader:load",
}

Loader = Callable[[Mapping[str, Any], Path | None], LoadedModel]


def resolve(family: str) -> Loader:
    """Return the ``load(options, checkpoint_dir)`` function of ``family``."""
    try:
        target = FAMILIES[family]
    except KeyError:
        raise ValueError(
            f"unknown model family {family!r}; known families: {', '.join(sorted(FAMILIES))}"
        ) from None
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr)


def detect_config(checkpoint: Path, known: list[str]) -> str:
    """Name of the config (among ``known``) that fits a checkpoint directory or file."""
    if checkpoint.suffix == ".onnx" or any(checkpoint.glob("*.onnx.json")):
        return "piper-joe"
    if (checkpoint / "t3_turbo_v1.safetensors").is_file():
        return "chatterbox-turbo"
    config = checkpoint / "config.json"
    if config.is_file():
        import json

        data = json.loads(config.read_text(encoding="utf-8"))
        if data.get("model_type") == "qwen3_tts":
            variant = str(data.get("tts_model_type", "custom_voice")).replace("_", "")
            size = {"0b6": "0.6b", "1b7": "1.7b"}.get(str(data.get("tts_model_size")), "1.7b")
            exact = f"qwen3-tts-{size}-{variant}"
            if exact in known:
                return exact
            same_variant = sorted(
                k for k in known if k.startswith("qwen3-tts-") and k.endswith(variant)
            )
            if same_variant:
                return same_variant[-1]
    raise ValueError(
        f"cannot tell the model family of {checkpoint}: expected a Piper .onnx voice, a "
        "Qwen3-TTS checkpoint (config.json with model_type qwen3_tts) or a Chatterbox Turbo "
        "one (t3_turbo_v1.safetensors); pass --config"
    )
