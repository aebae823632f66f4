"""Load an unmodified VoXtream2 checkpoint directory as a servable model.

The directory as published (``herimor/voxtream2``): ``config.json``,
``phoneme_to_token.json``, ``model.safetensors``. The reference fetches two more files
from other repositories; here they sit in the same directory (or where the config
points): Kyutai's Mimi codec ``tokenizer-e351c8d8-checkpoint125.safetensors``
(required: it decodes the speech) and IDRnD's ReDimNet ``M-vb2+vox2+cnc-ft_mix.pt``
(optional: without it, voices cannot be cloned from audio). Named voices are prompt
files in ``voices/`` (``models.voxtream.voice``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import torch

from models.base import (
    CLONE_VOICE,
    Capabilities,
    LoadedModel,
    RequestField,
    VoiceInfo,
    parse_options,
)
from models.blocks.mimi import MIMI_FILE, load_mimi
from models.blocks.mimi_vocoder import MimiVocoder
from models.checkpoint import CheckpointError, checkpoint_root
from models.dtypes import DTYPES
from models.fields import MAX_NEW_TOKENS, REF_AUDIO, REF_AUDIO_SAMPLE_RATE, SEED, TOP_K
from models.kit.kv_pool import kv_blocks
from models.voxtream.checkpoint import load_model
from models.voxtream.clone import Cloner
from models.voxtream.config import load_config
from models.voxtream.pointer import PointerRules
from models.voxtream.rates import DEFAULT_RATES, SpeakingRates
from models.voxtream.runner import VoxRunner
from models.voxtream.sampling import VoxSampling
from models.voxtream.sizing import CPU
from models.voxtream.slots import BLOCK, VoxSlots
from models.voxtream.speaker import SPEAKER_FILE, load_speaker_encoder
from models.voxtream.text.frontend import VoxtreamText
from models.voxtream.voice import Voices, read_prompt, voice_files

PHONE_TABLE = "phoneme_to_token.json"
FRAME_MS = 80
DEFAULT = VoxSampling()


@dataclass(frozen=True)
class VoxOptions:
    checkpoint: str | None = None
    """Checkpoint directory (the ``checkpoint`` argument of ``load`` wins)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """The network's dtype; Mimi and the speaker encoder run in float32."""
    device: str = "cpu"
    max_contexts: int | Literal["auto"] = "auto"
    """Contexts generating at once. ``auto``: 4 on a CPU; on a GPU sized at start-up
    from the memory free after the weights (models.voxtream.sizing)."""
    kv_memory_fraction: float = 0.3
    """On a GPU, the most of the free memory the temporal transformer's KV pool takes."""
    cuda_graphs: bool = True
    """On CUDA, replay a frame step from graphs captured per batch size at start-up."""
    mimi: str | None = None
    """Kyutai's Mimi file; default: the checkpoint's ``tokenizer-e351c8d8-checkpoint125.
    safetensors``."""
    speaker_encoder: str | None = None
    """ReDimNet's ``.pt`` file; default: the checkpoint's ``M-vb2+vox2+cnc-ft_mix.pt``
    when present (without it, voices are not cloned from audio)."""
    mimi_window: Literal["moshi", "exact"] = "moshi"
    """How Mimi's decoder transformer looks back past its 250-step context: ``moshi``
    as the reference's streaming decoder does (its audio, exactly), ``exact`` as
    whole-sequence decoding does (models.blocks.mimi_vocoder)."""
    voices: str | None = None
    """Folder of voice prompts; default: the checkpoint's ``voices/``."""
    default_voice: str | None = None
    """The voice a request without one gets; default: the first named voice."""
    temperature: float = DEFAULT.temperature
    top_k: int = DEFAULT.top_k
    top_p: float = DEFAULT.top_p
    cfg_gamma: float = DEFAULT.cfg_gamma
    """Guidance of the first code (a speaking rate brings its own)."""
    cfg_ac_gamma: float = DEFAULT.cfg_ac_gamma
    """Guidance of the acoustic codes (voxtream2: 3.0; voxtream2.1: 2.0)."""
    spk_proj_weight: float = 1.5
    """Weight of the speaker embedding in the depth transformer's input (voxtream2: 1.5;
    voxtream2.1: 1.0)."""
    rate_window_s: float = 3.0
    """Seconds of recent frames the speaking-rate guidance counts (voxtream2: 3;
    voxtream2.1: 2)."""
    normalize_prompt_loudness: bool = False
    """Scale reference audio to ``prompt_loudness_lufs`` before cloning (voxtream2.1)."""
    prompt_loudness_lufs: float = -23.0
    max_frames: int = 749
    """Audio frames one context may make (80 ms each; the reference's 60 s: 750 steps, the
    first of which speaks nothing)."""
    max_phone_tokens: int = 2000
    """Phone tokens one context may hold (prompt and text); past it the text is cut."""
    bench_ignore_eos: bool = False
    """Benchmarks only: a context speaks until its frame cap (random weights end at
    random)."""


def _path(option: str | None, root: Path, default: str) -> Path:
    return Path(option) if option else root / default


def request_fields(sampling: VoxSampling, rates: SpeakingRates, max_frames: int) -> tuple:
    return (
        RequestField(
            "temperature",
            "number",
            0.0,
            2.0,
            low_exclusive=True,
            doc="of the pointer move and the first code",
            default=sampling.temperature,
        ),
        replace(TOP_K, doc="of the first code; 1 is greedy", default=sampling.top_k),
        RequestField(
            "top_p",
            "number",
            0.0,
            1.0,
            doc="of the pointer move; 0 keeps only the likeliest",
            default=sampling.top_p,
        ),
        RequestField(
            "cfg_gamma",
            "number",
            0.0,
            10.0,
            doc="classifier-free guidance of the first code",
            default=sampling.cfg_gamma,
        ),
        RequestField(
            "speaking_rate",
            "number",
            rates.low,
            rates.high,
            doc="syllables a second; unset: the voice's own pace",
        ),
        SEED,
        replace(MAX_NEW_TOKENS, doc="cap on frames (12.5 a second)", default=max_frames),
        replace(REF_AUDIO, doc="audio of a voice to clone (1 to 20 s used)"),
        REF_AUDIO_SAMPLE_RATE,
    )


def load(raw_options: Mapping[str, Any], checkpoint: Path | None = None) -> LoadedModel:
    options = parse_options(VoxOptions, raw_options, "model")
    root = checkpoint_root(checkpoint, options.checkpoint)
    device, dtype = torch.device(options.device), DTYPES[options.dtype]
    if options.max_contexts == "auto":
        options = replace(options, max_contexts=CPU.max_contexts)
    assert isinstance(options.max_contexts, int)
    if not 1 <= options.max_frames <= 100_000:
        raise ValueError(f"model.max_frames must be from 1 to 100000, got {options.max_frames}")
    if not 16 <= options.max_phone_tokens <= 2040:
        raise ValueError(
            f"model.max_phone_tokens must be from 16 to 2040 (the phone transformer's "
            f"positions), got {options.max_phone_tokens}"
        )
    cfg = load_config(root)
    table_path = root / PHONE_TABLE
    if not table_path.is_file():
        raise CheckpointError(f"{PHONE_TABLE} is missing (the phone -> id table)", root)
    text = VoxtreamText(json.loads(table_path.read_text(encoding="utf-8")))
    mimi_path = _path(options.mimi, root, MIMI_FILE)
    if not mimi_path.is_file():
        raise CheckpointError(
            f"the Mimi codec {mimi_path.name} is missing: put Kyutai's file "
            "(kyutai/moshiko-pytorch-bf16) in the checkpoint directory or set model.mimi",
            root,
        )
    codec = load_mimi(mimi_path, cfg.num_codebooks, device=device, dtype=torch.float32)
    speaker_path = _path(options.speaker_encoder, root, SPEAKER_FILE)
    cloner = None
    if speaker_path.is_file():
        speaker = load_speaker_encoder(speaker_path, device, torch.float32)
        cloner = Cloner(
            codec,
            speaker,
            normalize_loudness=options.normalize_prompt_loudness,
            lufs=options.prompt_loudness_lufs,
        )
    elif options.speaker_encoder:
        raise CheckpointError("the speaker encoder file is missing", speaker_path)
    codes_vocab = cfg.audio_vocab_size - 2
    folder = _path(options.voices, root, "voices")
    named = {
        name: read_prompt(path, cfg.num_codebooks, codes_vocab, cfg.spk_embedding_dim)
        for name, path in voice_files(folder).items()
    }
    if options.default_voice is not None:
        if options.default_voice not in named:
            raise ValueError(
                f"model.default_voice {options.default_voice!r} is not among the voices in "
                f"{folder}: {', '.join(named) or 'none'}"
            )
        named = {options.default_voice: named[options.default_voice], **named}
    if not named and cloner is None:
        raise CheckpointError(
            "no voice: put prompt files in voices/ (<name>.npz or <name>.prompt.npy) or the "
            f"speaker encoder {SPEAKER_FILE} (to clone from ref_audio)",
            root,
        )
    voices = Voices(named, cfg.num_codebooks, codes_vocab, cfg.spk_embedding_dim, cloner)
    model = load_model(root, cfg, device, dtype)
    blocks = kv_blocks(  # two cache rows a context: conditional and unconditional
        2 * options.max_contexts,
        cfg.audio_window_size,
        BLOCK,
        options.kv_memory_fraction,
        cfg.temporal,
        dtype,
        device,
    )
    slots = VoxSlots(
        model,
        options.max_contexts,
        options.max_phone_tokens + 2,
        blocks=blocks,
        cuda_graphs=options.cuda_graphs,
        speaker_weight=options.spk_proj_weight,
    )
    sampling = VoxSampling(
        options.temperature, options.top_k, options.top_p, options.cfg_gamma, options.cfg_ac_gamma
    )
    rates = SpeakingRates(DEFAULT_RATES)
    offered = [VoiceInfo(name, "en", "a voice prompt") for name in named]
    if cloner is not None:
        offered.append(VoiceInfo(CLONE_VOICE, "en", "voice cloned from ref_audio"))
    capabilities = Capabilities(
        family="voxtream",
        sample_rate=codec.sample_rate,
        samples_per_frame=codec.samples_per_frame,
        voices=tuple(offered),
        languages=("en",),
        streaming_text=True,
        max_frames_per_context=options.max_frames,
        max_context_chars=options.max_phone_tokens - 300,
        request_fields=request_fields(sampling, rates, options.max_frames),
    )
    rules = PointerRules(rate_window=max(1, round(options.rate_window_s * 1000 / FRAME_MS)))
    runner = VoxRunner(
        slots,
        text,
        voices,
        capabilities,
        sampling,
        rates,
        max_frames=options.max_frames,
        max_phones=options.max_phone_tokens,
        rules=rules,
        ignore_eos=options.bench_ignore_eos,
    )
    # Streams outlive their contexts' slots while the vocoder drains them.
    vocoder = MimiVocoder(
        codec, 2 * options.max_contexts, graphs=options.cuda_graphs, window=options.mimi_window
    )
    return LoadedModel(runner=runner, vocoder=vocoder)
