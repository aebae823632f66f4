"""VoxCPM2's weights: ``model.safetensors`` (the network) and ``audiovae.pth`` (the AudioVAE),
loaded strictly.

The reference loads both with ``strict=False``, so a missing tensor there keeps its
random start; here every tensor the config implies must be in the file with its shape,
and none else (``models.checkpoint``): a missing or misshapen one is named.
"""

from __future__ import annotations

from pathlib import Path

import torch

from models.blocks.audiovae import (
    VAE_FILE,
    AudioVAEConfig,
    AudioVAEDecoder,
    decoder_keys,
    vae_file,
)
from models.checkpoint import (
    CheckpointError,
    WeightReport,
    compare,
    header_shapes,
    load_tensors,
    load_weights,
    module_shapes,
    read_headers,
    read_json,
)
from models.voxcpm.model import VoxCPMModel

WEIGHTS = "model.safetensors"


def load_config(directory: Path) -> dict:
    """``config.json`` as the reference reads it (``architecture`` must be voxcpm2)."""
    data = read_json(Path(directory) / "config.json")
    arch = str(data.get("architecture", "voxcpm")).lower()
    if arch != "voxcpm2":
        raise CheckpointError(
            f"config.json: architecture {arch!r} is not served (this family serves voxcpm2)",
            directory,
        )
    for key in ("lm_config", "encoder_config", "dit_config", "audio_vae_config"):
        if not isinstance(data.get(key), dict):
            raise CheckpointError(f"config.json: {key} is missing", directory)
    return data


def vae_config(data: dict) -> AudioVAEConfig:
    return AudioVAEConfig.from_json(data["audio_vae_config"])


def _weights(directory: Path) -> Path:
    path = Path(directory) / WEIGHTS
    if not path.is_file():
        raise CheckpointError(f"{WEIGHTS} is missing (the network's weights)", directory)
    return path


def load_model(
    directory: Path, data: dict, device: torch.device, dtype: torch.dtype
) -> VoxCPMModel:
    """The network in ``dtype`` on ``device``: built without initialising, then every
    tensor from the file (strictly), then the rotary frequencies (float32)."""
    path = _weights(directory)
    with torch.device("meta"):
        model = VoxCPMModel(data)
    compare(
        module_shapes(model), header_shapes(read_headers([path])), "VoxCPM2", file=WEIGHTS
    ).raise_if_bad()
    model = model.to_empty(device=device).to(dtype)
    load_weights(model, load_tensors([path]), "VoxCPM2", file=WEIGHTS)
    model.set_rope(data)
    return model.eval().requires_grad_(False)


def check_weights(directory: Path) -> list[WeightReport]:
    """The strict check of both files against ``config.json`` (headers and the VAE's
    tensor shapes; nothing loaded into a model)."""
    directory = Path(directory)
    data = load_config(directory)
    with torch.device("meta"):
        model = VoxCPMModel(data)
        decoder = AudioVAEDecoder(vae_config(data))
    reports = [
        compare(
            module_shapes(model),
            header_shapes(read_headers([_weights(directory)])),
            "VoxCPM2",
            file=WEIGHTS,
        )
    ]
    vae = vae_file(directory)
    if not vae.is_file():
        raise CheckpointError(f"{VAE_FILE} is missing (the AudioVAE)", directory)
    if vae.suffix == ".safetensors":
        shapes = header_shapes(read_headers([vae]))
    else:
        state = torch.load(str(vae), map_location="meta", weights_only=True)
        state = state.get("state_dict", state) if isinstance(state, dict) else {}
        shapes = {k: tuple(v.shape) for k, v in state.items()}
    found = {k[len("decoder.") :]: v for k, v in shapes.items() if k.startswith("decoder.")}
    reports.append(
        compare(decoder_keys(decoder), found, "AudioVAE decoder", file=vae.name, prefix="decoder.")
    )
    return reports
