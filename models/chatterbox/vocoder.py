"""S3Gen behind the Vocoder contract, a whole unit (clause) at a time.

The flow attends over every token of a call, so a clause's audio depends on all
of its tokens: this stage decodes whole units (``Vocoder.whole_units``): the engine
hands it a unit once it is closed, all of it in view. The first chunk of a unit decodes the
unit exactly as the reference decodes an utterance and keeps its audio; later
chunks of the unit are slices of it. Units closing in the same call share one
batched flow call (the flow is launch-bound: ~1,600 small kernels a call).
Streaming inside a clause is the next policy (docs/chatterbox.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from models.base import DecodeItem, Vocoder
from models.chatterbox.s3gen import Conditioning, S3Gen, draw_utterance_noise

UNIT_TOKENS = 1100
"""More than one utterance can hold (1,001 tokens and the 3 silence tokens)."""
SAMPLES_PER_TOKEN = 960
FLOW_BATCH = 16
"""Units whose flow runs in one call at most (their attention maps grow with it)."""


@dataclass(frozen=True)
class StreamConditioning:
    """``Prepared.conditioning`` of a Chatterbox context: its voice and random key."""

    voice: Conditioning
    key: int


@dataclass
class _Stream:
    voice: Conditioning
    generator: torch.Generator
    audio: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    """The current unit's audio."""


class ChatterboxVocoder(Vocoder):
    sample_rate = 24000
    samples_per_frame = SAMPLES_PER_TOKEN
    whole_units = UNIT_TOKENS

    def __init__(self, s3gen: S3Gen, device: torch.device, dtype: torch.dtype) -> None:
        self.s3gen = s3gen
        self.device, self.dtype = device, dtype

    def new_stream(self, conditioning: object = None) -> _Stream:
        if not isinstance(conditioning, StreamConditioning):
            raise ValueError("a Chatterbox stream needs its voice (StreamConditioning)")
        v = conditioning.voice
        voice = Conditioning(
            v.prompt_tokens.to(self.device),
            v.prompt_mel.to(self.device, self.dtype),
            v.embedding.to(self.device, self.dtype),
        )
        generator = torch.Generator().manual_seed(conditioning.key)
        return _Stream(voice, generator)

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        starting = [item for item in items if item.left == 0]  # whole units, just closed
        for first in range(0, len(starting), FLOW_BATCH):
            self._units(starting[first : first + FLOW_BATCH])
        out = []
        for item in items:
            stream = item.stream
            assert isinstance(stream, _Stream)
            start = item.left * SAMPLES_PER_TOKEN
            out.append(stream.audio[start : start + item.chunk_frames * SAMPLES_PER_TOKEN])
        return out

    def _units(self, items: list[DecodeItem]) -> None:
        """Decode each item's whole unit (batched) into its stream's ``audio``."""
        jobs = []
        for item in items:
            stream = item.stream
            assert isinstance(stream, _Stream)
            tokens = np.asarray(item.frames).reshape(-1)
            prompt = stream.voice.prompt_tokens.shape[1]
            noise = draw_utterance_noise(len(tokens), prompt, stream.generator)
            ids = torch.as_tensor(tokens, dtype=torch.long, device=self.device)
            jobs.append((ids, stream.voice, noise.to(self.device, self.dtype)))
        audio = self.s3gen.utterances(jobs)
        for item, wav in zip(items, audio, strict=True):
            item.stream.audio = wav.float().cpu().numpy()
