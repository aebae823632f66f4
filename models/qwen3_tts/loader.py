"""``load(options, checkpoint_dir) -> LoadedModel`` for an unmodified HF Qwen3-TTS directory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import torch

from models.base import Capabilities, LoadedModel, parse_options
from models.blocks.llama import RMSNorm
from models.checkpoint import checkpoint_root
from models.dtypes import DTYPES
from models.kit.kv_pool import kv_blocks as pool_blocks
from models.qwen3_tts.checkpoint import load_module, load_tensors, read_json, weight_prefixes
from models.qwen3_tts.config import (
    TransformerConfig,
    parse_config,
    parse_speech_tokenizer_config,
)
from models.qwen3_tts.modules import Qwen3TTSWeights, SpeechTokenizerWeights
from models.qwen3_tts.params import request_fields
from models.qwen3_tts.runner import ARSettings, Qwen3Runner
from models.qwen3_tts.sampling import SamplingParams
from models.qwen3_tts.sizing import CPU
from models.qwen3_tts.text_tokenizer import load_text_tokenizer
from models.qwen3_tts.vocoder import Qwen3Vocoder
from models.qwen3_tts.voice_clone import VoiceCloner
from models.qwen3_tts.voices import VoiceResolver


@dataclass(frozen=True)
class Qwen3Options:
    checkpoint: str | None = None
    """Checkpoint directory (the ``checkpoint`` argument of ``load`` wins)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "cpu"
    max_contexts: int | Literal["auto"] = "auto"
    """Contexts generating at once: the most there will be. ``auto``: sized by the server
    at start-up from the GPU memory free after the weights (``voiceserver.sizing``);
    8 on a CPU, or when the model is loaded outside the server."""
    kv_memory_fraction: float = 0.5
    """Share of the GPU memory free once the weights are loaded that KV blocks may take;
    the rest is left for activations and graphs (the vocoder's grow with its batch)."""
    kv_capacity: int = 2048
    """Talker positions one context may reach (prompt + frames)."""
    kv_block_size: int = 32
    """Positions per KV block: contexts take blocks as they grow (16, 32, 64 or 128)."""
    cuda_graphs: bool = True
    """On CUDA, capture the frame step per batch size at start-up and replay it (False:
    launch every kernel of every step, as on the CPU)."""
    graph_prefill_rows: int = 64
    """With ``cuda_graphs``: a step's prompt positions up to this many run as
    one-position rows of captured graphs (on an H200 this halved time to first audio
    at 1 stream, 53 -> 26 ms); a larger burst of arrivals runs eagerly in one padded
    call, which measured faster there (64 streams: p95 333 vs 450 ms). 0: always eager."""
    fused_kernels: bool = True
    """On CUDA, fused Triton kernels for RMSNorm and norm + rotary embedding (False:
    PyTorch's own operators, as on the CPU)."""
    bench_ignore_eos: bool = False
    """Benchmarks only: never end speech, so every context runs to its frame cap."""
    max_frames: int = 2048
    """Frames one context may generate (2048 = 164 s)."""
    streaming_text: bool = True
    """Consume text one token per frame as it arrives (False: wait for all text)."""
    word_lag_frames: int = 1
    """Word timestamps (streaming text only): frames between a word's first token
    entering the talker and the start of its audio, at the least (docs/engine.md)."""
    word_frames_per_token: float = 3.75
    """Word timestamps: the speaking rate assumed for a word's length, in frames per
    text token (3.75 = 300 ms: about 150 English words a minute at 1.33 tokens a
    word)."""
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    subtalker_temperature: float | None = None
    subtalker_top_k: int | None = None
    subtalker_top_p: float | None = None
    ref_audio_min_s: float = 1.0
    ref_audio_max_s: float = 60.0


def sampling_defaults(generation: Mapping[str, Any], options: Qwen3Options) -> SamplingParams:
    """Options over generation_config.json over the reference's hard defaults."""

    def pick(name: str, hard: float) -> Any:
        value = getattr(options, name)
        if value is not None:
            return value
        return generation.get(name, hard)

    greedy = generation.get("do_sample") is False
    sub_greedy = generation.get("subtalker_dosample") is False
    return SamplingParams(
        temperature=0.0
        if greedy and options.temperature is None
        else float(pick("temperature", 0.9)),
        top_k=int(pick("top_k", 50)),
        top_p=float(pick("top_p", 1.0)),
        repetition_penalty=float(pick("repetition_penalty", 1.05)),
        subtalker_temperature=0.0
        if sub_greedy and options.subtalker_temperature is None
        else float(pick("subtalker_temperature", 0.9)),
        subtalker_top_k=int(pick("subtalker_top_k", 50)),
        subtalker_top_p=float(pick("subtalker_top_p", 1.0)),
    )


def context_chars(kv_capacity: int) -> int:
    """Text one context can speak whole: its text and its audio share the context's
    ``kv_capacity`` positions. English speech runs about 14 characters a second, 0.9
    frames a character at 12.5 frames/s, and its text about 0.25 tokens a character, so
    a character takes about 1.1 positions; half a position a character leaves room for a
    slow voice, a low ``speed`` and the voice's prompt. (``max_frames`` stays what it
    is, a cap on one context's audio; it does not shrink the pieces.)"""
    return max(1, kv_capacity // 2)


def kv_blocks(
    options: Qwen3Options, stack: TransformerConfig, dtype: torch.dtype, device: torch.device
) -> int:
    """The talker's KV blocks (``models.kit.kv_pool``), its options checked first."""
    if options.word_lag_frames < 0 or not options.word_frames_per_token > 0:
        raise ValueError(
            "model.word_lag_frames must be 0 or more and model.word_frames_per_token above 0, "
            f"got {options.word_lag_frames} and {options.word_frames_per_token}"
        )
    return pool_blocks(
        options.max_contexts,
        options.kv_capacity,
        options.kv_block_size,
        options.kv_memory_fraction,
        stack,
        dtype,
        device,
    )


def load(raw_options: Mapping[str, Any], checkpoint: Path | None = None) -> LoadedModel:
    options = parse_options(Qwen3Options, raw_options, "model")
    if options.max_contexts == "auto":
        options = replace(options, max_contexts=CPU.max_contexts)
    root = checkpoint_root(checkpoint, options.checkpoint)
    dtype = DTYPES[options.dtype]
    device = torch.device(options.device)

    cfg = parse_config(read_json(root / "config.json"))
    st_dir = root / "speech_tokenizer"
    st_cfg = parse_speech_tokenizer_config(read_json(st_dir / "config.json"))
    generation = read_json(root / "generation_config.json", required=False)
    tokenizer = load_text_tokenizer(root, cfg.transformers_version)

    weights = Qwen3TTSWeights(cfg)
    prefixes, st_prefixes = weight_prefixes(cfg.model_type)
    load_module(weights, load_tensors(root, prefixes), root / "model.safetensors", dtype)
    is_base = cfg.model_type == "base"
    st_weights = SpeechTokenizerWeights(st_cfg, with_encoder=is_base)
    load_module(st_weights, load_tensors(st_dir, st_prefixes), st_dir / "model.safetensors", dtype)
    weights.to(device).eval()
    st_weights.to(device).eval()
    for module in (*weights.modules(), *st_weights.modules()):
        if isinstance(module, RMSNorm):
            module.fused = options.fused_kernels

    cloner = None
    if is_base:
        assert weights.speaker_encoder is not None and st_weights.encoder is not None
        # The reference computes both in the model dtype; fp32 keeps clones stable on CPU.
        cloner = VoiceCloner(
            st_weights.encoder,
            weights.speaker_encoder,
            st_cfg.encoder_valid_num_quantizers,
            st_cfg.encode_downsample_rate,
        )
    voices = VoiceResolver(
        cfg,
        tokenizer,
        cloner,
        options.ref_audio_min_s,
        options.ref_audio_max_s,
    )
    sampling = sampling_defaults(generation, options)
    capabilities = Capabilities(
        family="qwen3_tts",
        sample_rate=st_cfg.output_sample_rate,
        samples_per_frame=st_cfg.decode_upsample_rate,
        voices=voices.voice_infos(),
        languages=voices.language_codes(),
        streaming_text=options.streaming_text,
        supports_instructions=cfg.supports_instructions,
        max_frames_per_context=options.max_frames,
        max_context_chars=context_chars(options.kv_capacity),
        request_fields=request_fields(options.max_frames, sampling),
    )
    settings = ARSettings(
        max_contexts=options.max_contexts,
        kv_capacity=options.kv_capacity,
        kv_blocks=kv_blocks(options, cfg.talker.stack, dtype, device),
        kv_block_size=options.kv_block_size,
        cuda_graphs=options.cuda_graphs,
        graph_prefill_rows=options.graph_prefill_rows,
        ignore_eos=options.bench_ignore_eos,
        max_frames=options.max_frames,
        streaming_text=options.streaming_text,
        sampling=sampling,
        word_lag_frames=options.word_lag_frames,
        word_frames_per_token=options.word_frames_per_token,
    )
    assert weights.talker is not None
    vocoder = Qwen3Vocoder(
        st_weights.decoder,
        st_cfg.output_sample_rate,
        st_cfg.decode_upsample_rate,
        # Room for the streams expected at once (with graphs, twice that, fixed: a
        # stream may still be decoding after its context has left its slot).
        rows=settings.max_contexts if options.cuda_graphs else min(settings.max_contexts, 256),
        graphs=options.cuda_graphs,
    )
    runner = Qwen3Runner(
        cfg, weights.talker, tokenizer, voices, capabilities, settings, prime=vocoder.primed
    )
    return LoadedModel(runner=runner, vocoder=vocoder)
