"""Reading a ``ResembleAI/chatterbox-turbo`` checkpoint directory.

The error and the strict loader are every family's (``models.checkpoint``); they
are named here too for the family's modules.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from models.chatterbox.t3 import T3, UNUSED_KEYS, T3Config
from models.checkpoint import (
    CheckpointError,
    WeightReport,
    compare,
    header_shapes,
    load_weights,
    module_shapes,
    read_header,
)

__all__ = ["T3_FILE", "CheckpointError", "check_weights", "load_t3", "load_weights"]

T3_FILE = "t3_turbo_v1.safetensors"


def load_t3(directory: Path, device: torch.device, dtype: torch.dtype) -> T3:
    path = Path(directory) / T3_FILE
    if not path.is_file():
        raise CheckpointError(f"missing {T3_FILE} (the T3 weights)", directory)
    state = load_file(str(path))
    for key in UNUSED_KEYS:
        state.pop(key, None)
    model = T3(T3Config.from_state(state))
    load_weights(model, state, "T3", file=path)
    return model.to(device=device, dtype=dtype).eval()


def check_weights(directory: Path) -> list[WeightReport]:
    """The strict check of every weight file against the modules the loader builds,
    from the files' headers and modules built on the meta device (nothing is loaded)."""
    from models.blocks.flow import Flow
    from models.blocks.hift import HiFT
    from models.chatterbox.campplus import CAMPPlus
    from models.chatterbox.loader import S3GEN_FILE
    from models.chatterbox.s3_tokenizer import S3Tokenizer
    from models.chatterbox.voice_encoder import VE_FILE, VoiceEncoder

    directory = Path(directory)
    reports = []
    t3_path, s3gen_path, ve_path = (directory / f for f in (T3_FILE, S3GEN_FILE, VE_FILE))
    for path in (t3_path, s3gen_path, ve_path):
        if not path.is_file():
            raise CheckpointError(f"missing {path.name}", directory)
    t3_found = header_shapes(read_header(t3_path))
    for key in UNUSED_KEYS:
        t3_found.pop(key, None)
    with torch.device("meta"):
        meta = {k: torch.empty(shape) for k, shape in t3_found.items()}
        try:
            t3 = T3(T3Config.from_state(meta))  # type: ignore[arg-type]
        except (KeyError, ValueError, IndexError) as err:
            raise CheckpointError(f"not a T3 checkpoint (no {err})", t3_path) from err
        parts = [
            (Flow(), "flow.", (), "flow"),
            (HiFT(), "mel2wav.", (), "HiFT vocoder"),
            (S3Tokenizer(), "tokenizer.", ("_mel_filters", "window"), "S3 tokenizer"),
            (CAMPPlus(), "speaker_encoder.", (), "CAM++ speaker encoder"),
        ]
        voice_encoder = VoiceEncoder()
    reports.append(compare(module_shapes(t3), t3_found, "T3", file=T3_FILE))
    s3gen = read_header(s3gen_path)
    for module, prefix, optional, what in parts:
        found = header_shapes(s3gen, prefix)
        reports.append(
            compare(
                module_shapes(module),
                found,
                what,
                file=S3GEN_FILE,
                prefix=prefix,
                optional=optional,
            )
        )
    reports.append(
        compare(
            module_shapes(voice_encoder),
            header_shapes(read_header(ve_path)),
            "voice encoder",
            file=VE_FILE,
        )
    )
    return reports
