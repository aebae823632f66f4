"""Real-size checkpoints as headers only: every tensor declared at its published shape,
the data a hole in a sparse file (no disk, no memory, no tensor made). For what reads
only configs and headers: recognition, the strict header check, memory sizing.

    qwen3(out, "1b7", "custom_voice")   # Qwen3-TTS-12Hz-1.7B-CustomVoice's shapes
    chatterbox(out)                     # Chatterbox Turbo's (T3 GPT-2 medium, S3Gen, VE)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from models.checkpoint import SAFETENSORS_DTYPE_BYTES

Shapes = Mapping[str, tuple[int, ...]]


def write_header_only(path: Path, shapes: Shapes, dtype: str = "BF16") -> Path:
    """A safetensors file declaring ``shapes`` at ``dtype`` whose data is never written."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    size = SAFETENSORS_DTYPE_BYTES[dtype]
    for key, shape in sorted(shapes.items()):
        end = offset + math.prod(shape) * size
        header[key] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, end]}
        offset = end
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.write(len(raw).to_bytes(8, "little") + raw)
        handle.truncate(8 + len(raw) + offset)
    return path


def meta_shapes(module: nn.Module, prefix: str = "") -> dict[str, tuple[int, ...]]:
    return {prefix + k: tuple(v.shape) for k, v in module.state_dict().items()}


def qwen3(out: Path, size: str = "1b7", variant: str = "custom_voice") -> Path:
    """A Qwen3-TTS directory with the published configs and shapes of ``size``."""
    from models.qwen3_tts.config import parse_config, parse_speech_tokenizer_config
    from models.qwen3_tts.modules import Qwen3TTSWeights, SpeechTokenizerWeights
    from tests.models.qwen3_tts.ckpt import (
        SPECIAL_TOKENS,
        BuildOptions,
        Sizes,
        model_config,
        speech_tokenizer_config,
    )

    opts = BuildOptions(variant=variant, size_name=size, sizes=Sizes.real(size))
    special = {token: 151643 + i for i, token in enumerate(SPECIAL_TOKENS)}
    config = model_config(opts, special, 151936)
    st_config = speech_tokenizer_config(opts)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "speech_tokenizer").mkdir(exist_ok=True)
    (out / "speech_tokenizer" / "config.json").write_text(json.dumps(st_config, indent=2))
    with torch.device("meta"):
        weights = Qwen3TTSWeights(parse_config(config))
        tokenizer = SpeechTokenizerWeights(parse_speech_tokenizer_config(st_config))
    write_header_only(out / "model.safetensors", meta_shapes(weights))
    write_header_only(out / "speech_tokenizer" / "model.safetensors", meta_shapes(tokenizer), "F32")
    return out


def chatterbox(out: Path) -> Path:
    """A Chatterbox Turbo directory with its published shapes (T3: GPT-2 medium)."""
    from models.blocks.flow import Flow
    from models.blocks.hift import HiFT
    from models.chatterbox.campplus import CAMPPlus
    from models.chatterbox.s3_tokenizer import S3Tokenizer
    from models.chatterbox.t3 import T3, T3Config
    from models.chatterbox.voice_encoder import VoiceEncoder

    cfg = T3Config()
    with torch.device("meta"):
        t3 = meta_shapes(T3(cfg))
        s3gen = {
            **meta_shapes(Flow(), "flow."),
            **meta_shapes(HiFT(), "mel2wav."),
            **meta_shapes(S3Tokenizer(), "tokenizer."),
            **meta_shapes(CAMPPlus(), "speaker_encoder."),
        }
        ve = meta_shapes(VoiceEncoder())
    t3["tfmr.wte.weight"] = (cfg.text_vocab, cfg.hidden)
    t3["text_head.weight"] = (cfg.text_vocab, cfg.hidden)
    write_header_only(out / "t3_turbo_v1.safetensors", t3, "F32")
    write_header_only(out / "s3gen_meanflow.safetensors", s3gen, "F32")
    write_header_only(out / "ve.safetensors", ve, "F32")
    return out
