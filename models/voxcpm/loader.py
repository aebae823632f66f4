"""Load an unmodified VoxCPM2 checkpoint directory as a servable model.

The directory as published (``openbmb/VoxCPM2``): ``config.json`` (``"architecture":
"voxcpm2"``), ``model.safetensors``, ``audiovae.pth`` (or ``audiovae.safetensors``, which
the reference prefers when both are there) and the tokenizer files (``tokenizer.json``,
``tokenizer_config.json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import torch

from models.base import CLONE_VOICE, Capabilities, LoadedModel, VoiceInfo, parse_options
from models.blocks.audiovae import load_audiovae_decoder, load_audiovae_encoder, vae_file
from models.checkpoint import checkpoint_root
from models.dtypes import DTYPES
from models.fields import with_defaults
from models.kit.kv_pool import kv_blocks
from models.voxcpm.checkpoint import load_config, load_model, vae_config
from models.voxcpm.config import lm_stack
from models.voxcpm.runner import DEFAULT_VOICE, MAX_TURN_PATCHES, REQUEST_FIELDS, VoxCPMRunner
from models.voxcpm.sizing import CPU
from models.voxcpm.slots import BLOCK, VoxCPMSlots
from models.voxcpm.text import VoxCPMText
from models.voxcpm.vocoder import AudioVAEVocoder
from models.voxcpm.voice import Cloner

LANGUAGES = (
    "en", "zh", "ar", "my", "da", "nl", "fi", "fr", "de", "el", "he", "hi", "id", "it",
    "ja", "km", "ko", "lo", "ms", "no", "pl", "pt", "ru", "es", "sw", "sv", "tl", "th",
    "tr", "vi",
)  # fmt: skip
"""The 30 languages of the release's model card (the text says which; nothing is set)."""


@dataclass(frozen=True)
class VoxCPMOptions:
    checkpoint: str | None = None
    """Checkpoint directory (the ``checkpoint`` argument of ``load`` wins)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """The network's dtype (the release: bfloat16); the AudioVAE runs in float32."""
    device: str = "cpu"
    max_contexts: int | Literal["auto"] = "auto"
    """Contexts generating at once. ``auto``: 4 on a CPU; on a GPU sized at start-up from
    the memory free after the weights (models.voxcpm.sizing)."""
    kv_capacity: int | None = None
    """Positions one turn may hold (its prompt, text and patches); default: config.json's
    ``max_length`` (the reference's cache), which it may not exceed."""
    kv_memory_fraction: float = 0.4
    """On a GPU, the most of the free memory the two KV pools take; slots share it."""
    cfg_value: float = 2.0
    """Guidance of the diffusion step (a request's ``cfg_value`` overrides it)."""
    inference_timesteps: int = 10
    """Euler steps of each patch's flow-matching solve (one server-wide value: a step's
    graph holds them)."""
    min_len: int = 2
    """The stop head is read from a turn's step ``min_len + 1`` on (the reference's)."""
    max_new_tokens: int = MAX_TURN_PATCHES
    """Patches one text unit may make, at most (the reference also caps a text at
    ``int(6 * tokens + 10)``); a request's ``max_new_tokens`` lowers it."""
    cuda_graphs: bool = True
    """On CUDA, replay a step (both models, the solve, the local encoder) from graphs
    captured per batch size at start-up."""
    ref_audio_min_s: float = 0.5
    ref_audio_max_s: float = 60.0
    """Longest reference audio a clone takes (its patches sit in every turn's prompt)."""
    bench_ignore_eos: bool = False
    """Benchmarks only: every turn runs to its cap (random weights stop at random)."""


def load(raw_options: Mapping[str, Any], checkpoint: Path | None = None) -> LoadedModel:
    options = parse_options(VoxCPMOptions, raw_options, "model")
    if options.max_contexts == "auto":
        options = replace(options, max_contexts=CPU.max_contexts)
    assert isinstance(options.max_contexts, int)
    root = checkpoint_root(checkpoint, options.checkpoint)
    data = load_config(root)
    longest = int(data.get("max_length", 8192))
    capacity = options.kv_capacity or longest
    if not 64 <= capacity <= longest:
        raise ValueError(
            f"model.kv_capacity must be from 64 to config.json's max_length ({longest}), "
            f"got {capacity}"
        )
    if not 1 <= options.inference_timesteps <= 100:
        raise ValueError(
            f"model.inference_timesteps must be from 1 to 100, got {options.inference_timesteps}"
        )
    if not 1 <= options.max_new_tokens <= 4 * MAX_TURN_PATCHES:
        raise ValueError(
            f"model.max_new_tokens must be from 1 to {4 * MAX_TURN_PATCHES}, "
            f"got {options.max_new_tokens}"
        )
    if not 0 <= options.min_len < 100:
        raise ValueError(f"model.min_len must be from 0 to 99, got {options.min_len}")
    device, dtype = torch.device(options.device), DTYPES[options.dtype]
    text = VoxCPMText(root)
    vae = vae_config(data)
    vae_path = vae_file(root)
    decoder = load_audiovae_decoder(vae_path, vae, device, torch.float32)
    encoder = load_audiovae_encoder(vae_path, vae, device, torch.float32)
    model = load_model(root, data, device, dtype)
    both = lm_stack(data)[0]  # a block holds a position of both models
    both = replace(both, num_layers=both.num_layers + data["residual_lm_num_layers"])
    blocks = kv_blocks(
        options.max_contexts, capacity, BLOCK, options.kv_memory_fraction, both, dtype, device
    )
    slots = VoxCPMSlots(
        model,
        options.max_contexts,
        capacity,
        blocks=blocks,
        steps=options.inference_timesteps,
        cuda_graphs=options.cuda_graphs,
    )
    cloner = Cloner(encoder, model.patch_size, options.ref_audio_min_s, options.ref_audio_max_s)
    capabilities = Capabilities(
        family="voxcpm",
        sample_rate=vae.out_sample_rate,
        samples_per_frame=model.patch_size * vae.samples_per_latent,
        voices=(
            VoiceInfo(DEFAULT_VOICE, "en", "the model's own voice (instructions describe one)"),
            VoiceInfo(CLONE_VOICE, "en", "voice cloned from ref_audio (and ref_text)"),
        ),
        languages=LANGUAGES,
        supports_instructions=True,
        request_fields=with_defaults(
            REQUEST_FIELDS, cfg_value=options.cfg_value, max_new_tokens=options.max_new_tokens
        ),
    )
    runner = VoxCPMRunner(
        slots,
        text,
        capabilities,
        capacity,
        cfg=options.cfg_value,
        max_frames=options.max_new_tokens,
        min_len=options.min_len,
        cloner=cloner,
        ignore_eos=options.bench_ignore_eos,
    )
    return LoadedModel(runner=runner, vocoder=AudioVAEVocoder(decoder, model.patch_size))
