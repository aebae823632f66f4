"""Cloning a voice from reference audio: the prompt's Mimi codes and the speaker embedding.

As the reference's ``prepare_prompt`` does it with VAD and speech enhancement off (their
released settings): the clip prepared by ``models.voxtream.prompt_audio`` (mono,
optionally loudness-normalised, 1 to 20 s, resampled to 24 and 16 kHz), Mimi's encoder
over the 24 kHz clip, the speaker encoder over the 16 kHz clip.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from models.blocks.mimi import Mimi
from models.voxtream.prompt_audio import load_prompt_audio
from models.voxtream.speaker import SpeakerEncoder
from models.voxtream.voice import VoxVoice


class Cloner:
    def __init__(
        self, mimi: Mimi, speaker: SpeakerEncoder, *, normalize_loudness: bool, lufs: float
    ) -> None:
        self.mimi = mimi
        self.speaker = speaker
        self.normalize_loudness = normalize_loudness
        self.lufs = lufs

    @torch.inference_mode()
    def __call__(self, extra: Mapping[str, Any]) -> VoxVoice:
        audio = load_prompt_audio(
            extra["ref_audio"],
            extra.get("ref_audio_sample_rate"),
            normalize_loudness=self.normalize_loudness,
            target_lufs=self.lufs,
        )
        wav = torch.as_tensor(audio.mimi, dtype=self.mimi.dtype, device=self.mimi.device)
        codes = self.mimi.encode(wav[None, None])[0].T.cpu().numpy().astype(np.int64)
        embedding = self.speaker.embed(audio.speaker)
        return VoxVoice(codes, np.asarray(embedding, np.float32))
