"""Reading a ``ResembleAI/chatterbox-turbo`` checkpoint directory."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from models.chatterbox.t3 import T3, UNUSED_KEYS, T3Config

T3_FILE = "t3_turbo_v1.safetensors"


class CheckpointError(ValueError):
    """A checkpoint directory this family cannot read; the message names the file."""


def load_t3(directory: Path, device: torch.device, dtype: torch.dtype) -> T3:
    path = Path(directory) / T3_FILE
    if not path.is_file():
        raise CheckpointError(f"{directory}: missing {T3_FILE} (the T3 weights)")
    state = load_file(str(path))
    for key in UNUSED_KEYS:
        state.pop(key, None)
    model = T3(T3Config.from_state(state))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: tensors do not match T3 (missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]})"
        )
    return model.to(device=device, dtype=dtype).eval()
