"""Is a directory a VoXtream2 checkpoint? Read from ``config.json`` alone."""

from __future__ import annotations

from pathlib import Path

from models.recognition import Recognized, read_config

LOOKS_FOR = "a VoXtream2 checkpoint (config.json naming phone_former, temp_former and dep_former)"


def recognize(path: Path) -> Recognized | None:
    data = read_config(path)
    names = ("phone_former", "temp_former", "dep_former")
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in names):
        return None
    return Recognized(
        family="voxtream",
        variant="voxtream2",
        config="voxtream2",
        why="config.json: phone_former, temp_former and dep_former (VoXtream's transformers)",
        path=path,
        details=(
            ("temporal", str(data["temp_former"])),
            ("window", str(data.get("audio_window_size", "?"))),
        ),
    )
