"""S3Gen behind the Vocoder contract: streamed inside a clause, or a whole clause at a time.

The flow attends over every token of a call, so a mel frame depends on all the
tokens it is decoded with. Streaming (the default) decodes as the reference's
``S3Gen.forward(..., finalize=False)`` does: each chunk runs the flow over the
unit's tokens so far plus the encoder's 3 look-ahead tokens, the look-ahead's
frames held back, and keeps the chunk's frames; HiFT re-decodes the call's mel with
the excitation already played kept (the reference's ``cache_source``), and the
chunk's samples are sent. A unit's last chunk is the reference's
``finalize=True`` call. Every call of a unit draws its noise after reseeding with
the unit's seed, as the reference does after ``torch.manual_seed``.

Whole units (``stream=False``): the engine hands a unit once it is closed; its first
chunk decodes the unit exactly as the reference decodes an utterance, later chunks
are slices of it. Calls of several streams share one batched flow call (the flow
is launch-bound: ~1,600 small kernels a call).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from models.base import DecodeItem, Vocoder
from models.blocks.flow import LOOKAHEAD
from models.chatterbox.s3gen import Conditioning, Prefix, S3Gen, draw_utterance_noise

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
    """Seeded with the context's key: one seed per unit (streaming), or every draw."""
    draws: torch.Generator
    """Reseeded with the unit's seed before each call. On the CPU whatever the decoder's
    device, so a seeded request sounds the same on every device (~10 ms of draws a
    3 s clause; the whole-unit path draws there too)."""
    unit_seed: int = 0
    played: torch.Tensor | None = None
    """HiFT's excitation of the current unit's samples sent so far."""
    audio: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    """Whole units: the current unit's audio."""

    def next_unit(self) -> None:
        self.unit_seed = unit_seed(self.generator)
        self.played = None


def unit_seed(generator: torch.Generator) -> int:
    """The next unit's seed from a stream's key generator."""
    return int(torch.randint(0, 2**62, (1,), generator=generator))


class ChatterboxVocoder(Vocoder):
    sample_rate = 24000
    samples_per_frame = SAMPLES_PER_TOKEN

    def __init__(
        self, s3gen: S3Gen, device: torch.device, dtype: torch.dtype, stream: bool = True
    ) -> None:
        self.s3gen = s3gen
        self.device, self.dtype = device, dtype
        self.stream = stream
        if stream:  # every chunk sees its unit from the start, and the look-ahead
            self.left_context, self.right_context = UNIT_TOKENS, LOOKAHEAD
        else:
            self.whole_units = UNIT_TOKENS

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
        return _Stream(voice, generator, torch.Generator())

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        if self.stream:
            out: list[np.ndarray] = []
            for first in range(0, len(items), FLOW_BATCH):
                out += self._chunks(items[first : first + FLOW_BATCH])
            return out
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

    def _chunks(self, items: list[DecodeItem]) -> list[np.ndarray]:
        """Each item's chunk, decoded from its unit's first token to the chunk's end
        (with the look-ahead read and held back while the unit runs on)."""
        calls = []
        for item in items:
            stream = item.stream
            assert isinstance(stream, _Stream)
            if item.left == 0:
                stream.next_unit()
            tokens = np.asarray(item.frames).reshape(-1)
            held = LOOKAHEAD if item.right == LOOKAHEAD else 0  # fewer: the unit ended
            stream.draws.manual_seed(stream.unit_seed)
            noise = draw_utterance_noise(
                len(tokens) - held, stream.voice.prompt_tokens.shape[1], stream.draws
            )
            ids = torch.as_tensor(tokens, dtype=torch.long).to(self.device)
            noise = noise.to(self.device, self.dtype)
            calls.append(Prefix(ids, stream.voice, noise, held, stream.played))
        out = []
        for item, (audio, source) in zip(items, self.s3gen.prefixes(calls), strict=True):
            start = item.left * SAMPLES_PER_TOKEN
            end = start + item.chunk_frames * SAMPLES_PER_TOKEN
            item.stream.played = source[..., :end]
            out.append(audio[start:end].float().cpu().numpy())
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
