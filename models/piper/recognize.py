"""Is a path a Piper voice (``VOICE.onnx`` with ``VOICE.onnx.json`` beside it)?"""

from __future__ import annotations

from pathlib import Path

from models.recognition import Recognized

LOOKS_FOR = "a Piper .onnx voice (with its .onnx.json)"


def voice_file(path: Path) -> Path | None:
    """The ``.onnx`` voice at ``path`` (the file, or the first in the folder) with its
    ``.onnx.json`` beside it."""
    if path.suffix == ".onnx":
        candidates = [path]
    elif path.is_dir():
        candidates = sorted(path.glob("*.onnx"))
    else:
        return None
    for model in candidates:
        if model.is_file() and Path(f"{model}.json").is_file():
            return model
    return None


def recognize(path: Path) -> Recognized | None:
    model = voice_file(path)
    if model is None:
        return None
    return Recognized(
        family="piper",
        variant=model.stem,
        config="piper-joe",
        why=f"{model.name} with {model.name}.json (a Piper voice)",
        path=path,
    )
