"""Reading a ``ResembleAI/chatterbox-turbo`` checkpoint directory."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

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
    try:
        load_weights(model, state, "T3")
    except ValueError as err:
        raise CheckpointError(f"{path}: {err}") from err
    return model.to(device=device, dtype=dtype).eval()


def load_weights(
    model: nn.Module,
    state: Mapping[str, torch.Tensor],
    what: str,
    prefix: str = "",
    optional: Collection[str] = (),
) -> None:
    """Load ``state`` into ``model``: every tensor the model has must be there (but
    the ``optional`` ones, which keep their own values), none extra, each of its
    shape; else a ``ValueError`` naming the first few that differ as the file spells
    them (``state``'s keys are the file's without ``prefix``)."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state) - set(optional))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"{what} tensors do not match: {len(missing)} missing "
            f"{[prefix + k for k in missing[:5]]}, {len(unexpected)} unexpected "
            f"{[prefix + k for k in unexpected[:5]]}"
        )
    wrong = [
        f"{prefix}{k} {tuple(state[k].shape)} (expected {tuple(v.shape)})"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    if wrong:
        raise ValueError(f"{what} tensors of the wrong shape: {wrong[:5]}")
    model.load_state_dict(state, strict=not optional)
