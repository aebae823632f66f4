"""Base model voice prompts: reference codes (12 Hz encoder) and the speaker x-vector."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from models.mel import log_mel
from models.qwen3_tts.mimi_encoder import MimiEncoder
from models.qwen3_tts.speaker_encoder import SpeakerEncoder


@dataclass(frozen=True)
class VoicePrompt:
    """What a cloned voice conditions on; compute once, reuse for every request."""

    speaker_embedding: np.ndarray
    """x-vector [talker hidden] float32."""
    ref_codes: np.ndarray | None = None
    """ICL mode: the reference's codes [frames, 16] int64 (None: x-vector only)."""
    ref_text: str | None = None


class VoiceCloner:
    def __init__(
        self,
        encoder: MimiEncoder,
        speaker_encoder: SpeakerEncoder,
        valid_quantizers: int,
        samples_per_frame: int,
    ) -> None:
        self.encoder = encoder
        self.speaker_encoder = speaker_encoder
        self.valid_quantizers = valid_quantizers
        self.samples_per_frame = samples_per_frame

    @torch.no_grad()
    def speaker_embedding(self, wav: np.ndarray) -> np.ndarray:
        """wav: mono float32 at 24 kHz."""
        mels = log_mel(torch.from_numpy(wav)[None])
        param = next(self.speaker_encoder.parameters())
        emb = self.speaker_encoder(mels.to(param.device, param.dtype))[0]
        return emb.float().cpu().numpy()

    @torch.no_grad()
    def ref_codes(self, wav: np.ndarray) -> np.ndarray:
        codes = self.encoder.encode(torch.from_numpy(wav)[None], self.valid_quantizers)[0]
        frames = -(-len(wav) // self.samples_per_frame)
        return codes[:, :frames].T.cpu().numpy().astype(np.int64)

    def prompt(self, wav: np.ndarray, ref_text: str | None, x_vector_only: bool) -> VoicePrompt:
        codes = None if x_vector_only else self.ref_codes(wav)
        return VoicePrompt(self.speaker_embedding(wav), codes, ref_text)
