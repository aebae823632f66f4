"""Is a directory a Fish Speech S2 Pro checkpoint? Read from ``config.json`` alone."""

from __future__ import annotations

from pathlib import Path

from models.recognition import Recognized, config_of

LOOKS_FOR = "a Fish Speech S2 Pro checkpoint (config.json with model_type fish_qwen3_omni)"


def recognize(path: Path) -> Recognized | None:
    data = config_of(path, "fish_qwen3_omni")
    if data is None:
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
