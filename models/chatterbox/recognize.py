"""Is a directory a ``ResembleAI/chatterbox-turbo`` checkpoint? Read from its file names."""

from __future__ import annotations

from pathlib import Path

from models.recognition import Recognized

LOOKS_FOR = "a Chatterbox Turbo checkpoint (t3_turbo_v1.safetensors)"
T3_FILE = "t3_turbo_v1.safetensors"


def recognize(path: Path) -> Recognized | None:
    if not (path / T3_FILE).is_file():
        return None
    return Recognized(
        family="chatterbox",
        variant="turbo",
        config="chatterbox-turbo",
        why=f"{T3_FILE} (T3 Turbo weights)",
        path=path,
    )
