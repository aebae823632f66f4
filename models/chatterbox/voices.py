"""Chatterbox voices: the built-in one from the checkpoint's ``conds.pt``.

``conds.pt`` holds T3's conditioning (``t3``: the voice encoder's speaker
embedding and the prompt's speech tokens) and S3Gen's (``gen``: the prompt's
speech tokens, their mel and the CAM++ x-vector), as tensors in plain dicts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.chatterbox.checkpoint import CheckpointError
from models.chatterbox.s3gen import Conditioning
from models.chatterbox.voice import Voice

BUILTIN_FILE = "conds.pt"
BUILTIN_VOICE = "default"
SPEAKER_DIM, XVECTOR_DIM, MELS = 256, 192, 80


def load_builtin(directory: Path) -> Voice | None:
    """The checkpoint's built-in voice, or None when it ships none."""
    path = Path(directory) / BUILTIN_FILE
    if not path.is_file():
        return None
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 (any unreadable file is the same error)
        raise CheckpointError(f"{path}: not a readable voice file ({err})") from err
    t3, gen = _section(data, "t3", path), _section(data, "gen", path)
    speaker = _tensor(t3, "speaker_emb", path, torch.float32).reshape(-1)
    prompt = _tensor(t3, "cond_prompt_speech_tokens", path, torch.long).reshape(-1)
    tokens = _tensor(gen, "prompt_token", path, torch.long).reshape(1, -1)
    mel = _tensor(gen, "prompt_feat", path, torch.float32)
    embedding = _tensor(gen, "embedding", path, torch.float32).reshape(1, -1)
    checks = (
        (speaker.numel() == SPEAKER_DIM, f"t3.speaker_emb must hold {SPEAKER_DIM} values"),
        (
            prompt.numel() > 0 and int(prompt.min()) >= 0 and int(prompt.max()) < 6561,
            "t3.cond_prompt_speech_tokens must be speech tokens in [0, 6561)",
        ),
        (embedding.shape[1] == XVECTOR_DIM, f"gen.embedding must hold {XVECTOR_DIM} values"),
        (
            mel.ndim == 3 and mel.shape[0] == 1 and mel.shape[2] == MELS,
            f"gen.prompt_feat must be [1, frames, {MELS}]",
        ),
        (
            tokens.numel() > 0 and int(tokens.min()) >= 0 and int(tokens.max()) < 6561,
            "gen.prompt_token must be speech tokens in [0, 6561)",
        ),
    )
    for ok, what in checks:
        if not ok:
            raise CheckpointError(f"{path}: {what}")
    decoder = Conditioning(tokens, mel, embedding)
    return Voice(speaker.numpy().astype(np.float32), prompt.numpy().astype(np.int64), decoder)


def _section(data: Any, name: str, path: Path) -> dict[str, Any]:
    section = data.get(name) if isinstance(data, dict) else None
    if not isinstance(section, dict):
        raise CheckpointError(f"{path}: no {name!r} section")
    return section


def _tensor(section: dict[str, Any], key: str, path: Path, dtype: torch.dtype) -> torch.Tensor:
    value = section.get(key)
    if not torch.is_tensor(value):
        raise CheckpointError(f"{path}: missing tensor {key!r}")
    return value.to(dtype)
