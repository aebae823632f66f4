"""The DAC codec's published file: ``codec.pth`` in a checkpoint directory (Fish
Speech S2 Pro's, and OpenAudio S1's before it).

The file is a flat state dict written by ``torch.save`` (541 tensors at S2 Pro's
sizes, float32 but the transformers' rotary tables in bfloat16 and their causal
masks in bool), keyed as ``fish-speech``'s ``modded_dac.DAC`` names its state:
``encoder.*``, ``quantizer.*``, ``decoder.*``, weight norm as stored (see
:mod:`models.blocks.dac`). Fish Speech's own loader also takes a Lightning
checkpoint (``{"state_dict": {"generator.<key>": ...}}``); so does this one.

The sizes come from the tensors (the attention windows from S2 Pro's published
config); the checks are strict: a missing, unexpected or misshapen tensor is a
:class:`CheckpointError` naming it.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

from models.blocks.dac import DAC, DACConfig, load_dac
from models.checkpoint import CheckpointError

__all__ = ["CODEC_FILE", "CheckpointError", "Codec", "DACConfig", "load_codec", "read_codec_state"]

CODEC_FILE = "codec.pth"

Codec = DAC
"""The loaded codec: ``sample_rate`` (44100), ``hop_length`` (2048 samples per frame),
``n_codebooks`` (10), ``encode(audio [B, samples]) -> codes [B, 10, T]``,
``decode(codes) -> audio [B, T * 2048]``."""

_GENERATOR = "generator."


def read_codec_state(root: Path) -> dict[str, torch.Tensor]:
    """The tensors of ``root/codec.pth`` (memory-mapped: the large causal masks are
    never read), keyed as the codec names them."""
    path = Path(root) / CODEC_FILE
    if not path.is_file():
        raise CheckpointError(f"missing {CODEC_FILE} (the codec's weights)", root)
    try:
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except RuntimeError:  # a file in torch's older format cannot be memory-mapped
        state = None
    except (OSError, pickle.UnpicklingError, EOFError) as exc:
        raise CheckpointError(
            f"not a readable torch state dict ({_first_line(exc)})", path
        ) from exc
    if state is None:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except (RuntimeError, OSError, pickle.UnpicklingError, EOFError) as exc:
            raise CheckpointError(
                f"not a readable torch state dict ({_first_line(exc)})", path
            ) from exc
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise CheckpointError("does not hold a state dict of named tensors", path)
    if any(k.startswith(_GENERATOR) for k in state):
        state = {k[len(_GENERATOR) :]: v for k, v in state.items() if k.startswith(_GENERATOR)}
    return state


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def load_codec(
    root: Path,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    config: DACConfig | None = None,
) -> Codec:
    """The codec of the S2 Pro checkpoint directory ``root`` on ``device`` in ``dtype``
    (float32 is what the reference runs it in). ``config``: sizes to hold the file
    to instead of the ones its tensors give."""
    path = Path(root) / CODEC_FILE
    model = load_dac(read_codec_state(root), file=str(path), config=config)
    return model.to(device=device, dtype=dtype)
