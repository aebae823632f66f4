"""Is a directory a Fish Speech S2 Pro checkpoint? Read from ``config.json`` alone."""

from __future__ import annotations

import json
from pathlib import Path

from models.recognition import Recognized

LOOKS_FOR = "a Fish Speech S2 Pro checkpoint (config.json with model_type fish_qwen3_omni)"


def recognize(path: Path) -> Recognized | None:
    config = path / "config.json"
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("model_type") != "fish_qwen3_omni":
        return None
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else {}
    return Recognized(
        family="fish_speech",
        variant="s2_pro",
        config="fish-speech-s2-pro",
        why="config.json: model_type fish_qwen3_omni (dual AR over a 44.1 kHz codec)",
        path=path,
        details=(("layers", str(text.get("n_layer", "?"))), ("width", str(text.get("dim", "?")))),
    )
