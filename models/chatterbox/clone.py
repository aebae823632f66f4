"""A Chatterbox voice from reference audio, as the reference prepares its conditionals.

From a clip at 24 kHz (longer than 5 s), loudness-normalised to -27 LUFS:

- T3's speaker embedding: the voice encoder over the whole clip at 16 kHz;
- T3's prompt: the S3 tokenizer's tokens of the first 15 s at 16 kHz (at most 375);
- S3Gen's prompt, from the first 10 s: its 80-bin log mel at 24 kHz (two frames a
  token), the CAM++ x-vector and the S3 tokens of that part taken to 16 kHz by a
  windowed-sinc resampler (the reference's torchaudio ``Resample``), the tokens cut
  to half the mel's frames where the two disagree.

The whole clip goes to 16 kHz as the reference's librosa takes it there (soxr's high
quality, length fixed). The encoders are float32 whatever the model's dtype (the loader's choice).
"""

from __future__ import annotations

import numpy as np
import torch

from models.base import ModelInputError
from models.chatterbox.campplus import CAMPPlus
from models.chatterbox.loudness import normalize_loudness
from models.chatterbox.s3_tokenizer import S3Tokenizer
from models.chatterbox.s3gen import Conditioning
from models.chatterbox.voice import Voice
from models.chatterbox.voice_encoder import VoiceEncoder, speaker_embedding
from models.mel import log_mel
from models.reference_audio import resample_like_librosa
from models.resample import resample

SAMPLE_RATE = 24_000
"""The rate reference audio is loaded at (S3Gen's)."""
TOKENIZER_RATE = 16_000
MIN_SECONDS = 5.0
"""The reference refuses clips of 5 s or less."""
ENCODER_SECONDS = 15
DECODER_SECONDS = 10
PROMPT_TOKENS = 375
"""T3's prompt: at most 15 s of speech tokens."""


class VoiceCloner:
    def __init__(
        self, voice_encoder: VoiceEncoder, tokenizer: S3Tokenizer, campplus: CAMPPlus
    ) -> None:
        self.voice_encoder = voice_encoder.eval()
        self.tokenizer = tokenizer.eval()
        self.campplus = campplus.eval()

    @torch.inference_mode()
    def clone(self, wav: np.ndarray) -> Voice:
        """A mono float32 clip at 24 kHz -> the voice (host arrays and CPU tensors)."""
        wav = np.asarray(wav, dtype=np.float32).reshape(-1)
        seconds = len(wav) / SAMPLE_RATE
        if seconds <= MIN_SECONDS:
            raise ModelInputError(
                f"ref_audio: too short ({seconds:.2f} s); Chatterbox clones from more "
                f"than {MIN_SECONDS:g} s of speech",
                param="ref_audio",
                code="invalid_field",
            )
        if not np.any(wav):
            raise ModelInputError(
                "ref_audio: the clip is silent", param="ref_audio", code="invalid_field"
            )
        wav = normalize_loudness(wav, SAMPLE_RATE).astype(np.float32, copy=False)
        wav16 = resample_like_librosa(wav, SAMPLE_RATE, TOKENIZER_RATE)
        speaker = speaker_embedding(self.voice_encoder, wav16)
        prompt, _ = self.tokenizer(
            [wav16[: ENCODER_SECONDS * TOKENIZER_RATE]], max_len=PROMPT_TOKENS
        )
        return Voice(speaker, prompt[0].cpu().numpy(), self.decoder_prompt(wav))

    def decoder_prompt(self, wav: np.ndarray) -> Conditioning:
        """S3Gen's conditioning from a loudness-normalised 24 kHz clip (its first 10 s)."""
        part = torch.from_numpy(np.ascontiguousarray(wav[: DECODER_SECONDS * SAMPLE_RATE]))
        mel = log_mel(part[None], SAMPLE_RATE, n_fft=1920, n_mels=80, hop=480, fmax=8000.0)
        part16 = resample(part, SAMPLE_RATE, TOKENIZER_RATE)
        assert isinstance(part16, torch.Tensor)
        embedding = self.campplus.embed(part16)
        tokens, _ = self.tokenizer([part16])
        tokens = tokens[:, : mel.shape[1] // 2].cpu()
        return Conditioning(tokens, mel.float(), embedding.cpu()[None])
