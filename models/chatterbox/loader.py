"""Load a ``ResembleAI/chatterbox-turbo`` checkpoint directory as a servable model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import load_file

from models.base import Capabilities, LoadedModel, VoiceInfo, parse_options
from models.blocks.flow import Flow
from models.blocks.hift import load_hift
from models.chatterbox.campplus import load_campplus
from models.chatterbox.checkpoint import CheckpointError, load_t3, load_weights
from models.chatterbox.clone import VoiceCloner
from models.chatterbox.runner import (
    CLONE_VOICE,
    DEFAULT_SAMPLING,
    MAX_UTTERANCE_TOKENS,
    REQUEST_FIELDS,
    ChatterboxRunner,
)
from models.chatterbox.s3_tokenizer import load_s3_tokenizer
from models.chatterbox.s3gen import S3Gen
from models.chatterbox.sampling import T3Sampling
from models.chatterbox.sizing import CPU
from models.chatterbox.text import load_text_tokenizer
from models.chatterbox.vocoder import ChatterboxVocoder
from models.chatterbox.voice_encoder import load_voice_encoder
from models.chatterbox.voices import BUILTIN_VOICE, load_builtin
from models.checkpoint import checkpoint_root
from models.dtypes import DTYPES
from models.fields import with_defaults

S3GEN_FILE = "s3gen_meanflow.safetensors"


@dataclass(frozen=True)
class ChatterboxOptions:
    checkpoint: str | None = None
    """Checkpoint directory (the ``checkpoint`` argument of ``load`` wins)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "cpu"
    max_contexts: int | Literal["auto"] = "auto"
    """T3 KV slots: contexts generating at once. ``auto``: sized by the server at start-up
    from the GPU memory free after the weights (``voiceserver.sizing``); 8 on a CPU, or
    when the model is loaded outside the server."""
    kv_capacity: int = 2048
    """T3 positions per slot: the voice prefix (up to 376), a clause's text and its
    speech tokens (up to 1,001)."""
    max_new_tokens: int = MAX_UTTERANCE_TOKENS
    """Speech tokens one utterance (clause) may make, at most (25 a second; the
    reference's cap is 1,001); a request's ``max_new_tokens`` lowers it."""
    temperature: float = DEFAULT_SAMPLING.temperature
    top_k: int = DEFAULT_SAMPLING.top_k
    top_p: float = DEFAULT_SAMPLING.top_p
    repetition_penalty: float = DEFAULT_SAMPLING.repetition_penalty
    cuda_graphs: bool = True
    """On CUDA, replay T3's decode step from graphs captured per batch size at start-up
    (False: launch every kernel of every step, as on the CPU)."""
    ref_audio_min_s: float = 5.0
    """Shortest reference audio a clone takes (the reference refuses 5 s or less)."""
    ref_audio_max_s: float = 60.0
    """Longest reference audio accepted (T3 reads its first 15 s, S3Gen its first 10)."""
    stream_decode: bool | Literal["auto"] = "auto"
    """Send a clause's audio while it is still being generated: each chunk decodes the
    clause's tokens so far plus 3 of look-ahead, as the reference's
    ``finalize=False`` does (first audio after the first chunk's tokens). False: decode
    each clause once it is whole (one flow call a clause: more throughput, first audio
    after the whole clause). ``auto``: stream on CUDA; whole clauses on the CPU, where
    a flow call takes seconds and re-running it for every chunk would fall behind."""
    bench_ignore_eos: bool = False
    """Benchmarks only: never sample the stop token, so every utterance runs to its
    cap (random weights stop at random)."""


def load(raw_options: Mapping[str, Any], checkpoint: Path | None = None) -> LoadedModel:
    options = parse_options(ChatterboxOptions, raw_options, "model")
    if options.max_contexts == "auto":
        options = replace(options, max_contexts=CPU.max_contexts)
    root = checkpoint_root(checkpoint, options.checkpoint)
    if options.max_contexts < 1 or options.kv_capacity < 512:
        raise ValueError(
            "model.max_contexts must be at least 1 and model.kv_capacity at least 512, "
            f"got {options.max_contexts} and {options.kv_capacity}"
        )
    if not 1 <= options.max_new_tokens <= MAX_UTTERANCE_TOKENS:
        raise ValueError(
            f"model.max_new_tokens must be from 1 to {MAX_UTTERANCE_TOKENS}, "
            f"got {options.max_new_tokens}"
        )
    device, dtype = torch.device(options.device), DTYPES[options.dtype]
    t3 = load_t3(root, device, dtype)
    tokenizer = load_text_tokenizer(root)
    s3gen_path = root / S3GEN_FILE
    if not s3gen_path.is_file():
        raise CheckpointError(f"{root}: missing {S3GEN_FILE} (the decoder weights)")
    state = load_file(str(s3gen_path))
    flow = Flow()
    flow_state = {k[len("flow.") :]: v for k, v in state.items() if k.startswith("flow.")}
    try:
        load_weights(flow, flow_state, "flow", "flow.")
        hift = load_hift(state)
    except ValueError as err:
        raise CheckpointError(f"{s3gen_path}: {err}") from err
    s3gen = S3Gen(flow.to(device, dtype), hift.to(device, dtype))
    cloner = _cloner(root, state, device)
    builtin = load_builtin(root)
    voices = {BUILTIN_VOICE: builtin} if builtin is not None else {}
    infos = [VoiceInfo(name, "en") for name in voices]
    infos.append(VoiceInfo(CLONE_VOICE, "en", "voice cloned from ref_audio"))
    sampling = T3Sampling(
        options.temperature, options.top_k, options.top_p, options.repetition_penalty
    )
    capabilities = Capabilities(
        family="chatterbox",
        sample_rate=ChatterboxVocoder.sample_rate,
        samples_per_frame=ChatterboxVocoder.samples_per_frame,
        voices=tuple(infos),
        languages=("en",),
        max_frames_per_context=0,
        request_fields=with_defaults(
            REQUEST_FIELDS,
            temperature=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            repetition_penalty=sampling.repetition_penalty,
            max_new_tokens=options.max_new_tokens,
        ),
    )
    runner = ChatterboxRunner(
        t3,
        tokenizer,
        voices,
        capabilities,
        options.max_contexts,
        options.kv_capacity,
        sampling,
        options.max_new_tokens,
        options.bench_ignore_eos,
        cloner,
        (options.ref_audio_min_s, options.ref_audio_max_s),
        options.cuda_graphs,
    )
    stream = options.stream_decode
    if stream == "auto":
        stream = device.type == "cuda"
    return LoadedModel(runner=runner, vocoder=ChatterboxVocoder(s3gen, device, dtype, stream))


def _cloner(root: Path, state: dict[str, torch.Tensor], device: torch.device) -> VoiceCloner:
    """The cloning encoders: ``ve.safetensors`` and S3Gen's ``tokenizer.*`` and
    ``speaker_encoder.*`` tensors. All three stay float32 whatever the model's dtype:
    they are small, run once a voice, and bf16 changes about one prompt token in
    twenty (the reference keeps them float32 too)."""
    voice_encoder = load_voice_encoder(root, device, torch.float32)
    try:
        tokenizer = load_s3_tokenizer(state, device, torch.float32)
        campplus = load_campplus(state).to(device)
    except ValueError as err:
        raise CheckpointError(f"{root / S3GEN_FILE}: {err}") from err
    return VoiceCloner(voice_encoder, tokenizer, campplus)
