"""Top-level modules whose state dicts are exactly the checkpoint's tensors."""

from __future__ import annotations

from torch import nn

from models.qwen3_tts.code2wav import Code2Wav
from models.qwen3_tts.config import Qwen3TTSConfig, SpeechTokenizerConfig
from models.qwen3_tts.mimi_encoder import MimiEncoder
from models.qwen3_tts.speaker_encoder import SpeakerEncoder
from models.qwen3_tts.talker import Talker


class Qwen3TTSWeights(nn.Module):
    """``model.safetensors``: ``talker.*`` and, for Base, ``speaker_encoder.*``."""

    def __init__(self, cfg: Qwen3TTSConfig) -> None:
        super().__init__()
        self.talker = Talker(cfg.talker)
        self.speaker_encoder = (
            SpeakerEncoder(cfg.speaker_encoder) if cfg.speaker_encoder is not None else None
        )


class SpeechTokenizerWeights(nn.Module):
    """``speech_tokenizer/model.safetensors``: ``decoder.*`` and ``encoder.*``."""

    def __init__(self, cfg: SpeechTokenizerConfig, with_encoder: bool = True) -> None:
        super().__init__()
        self.decoder = Code2Wav(cfg.decoder)
        self.encoder = MimiEncoder(cfg.encoder) if with_encoder else None
