"""Is a directory a VoxCPM2 checkpoint? Read from ``config.json`` alone."""

from __future__ import annotations

from pathlib import Path

from models.recognition import Recognized, read_config

LOOKS_FOR = 'a VoxCPM2 checkpoint (config.json with "architecture": "voxcpm2")'


def recognize(path: Path) -> Recognized | None:
    data = read_config(path)
    if not isinstance(data, dict) or str(data.get("architecture", "")).lower() != "voxcpm2":
        return None
    lm = data.get("lm_config") if isinstance(data.get("lm_config"), dict) else {}
    return Recognized(
        family="voxcpm",
        variant="voxcpm2",
        config="voxcpm2",
        why="config.json: architecture voxcpm2 (MiniCPM-4 + local DiT over AudioVAE latents)",
        path=path,
        details=(
            ("layers", str(lm.get("num_hidden_layers", "?"))),
            ("width", str(lm.get("hidden_size", "?"))),
        ),
    )
