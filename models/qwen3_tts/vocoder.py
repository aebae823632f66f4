"""Code2Wav behind the Vocoder interface: exact chunked decoding, batched over contexts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from models.base import DecodeItem, Vocoder
from models.qwen3_tts.code2wav import Code2Wav, DecoderStream


@dataclass
class VocoderStream:
    decoder: DecoderStream


class Qwen3Vocoder(Vocoder):
    right_context = 0
    left_context = 0

    def __init__(self, decoder: Code2Wav, sample_rate: int, samples_per_frame: int) -> None:
        self.decoder = decoder
        self.sample_rate = sample_rate
        self.samples_per_frame = samples_per_frame

    def new_stream(self, conditioning: Any = None) -> VocoderStream:
        """A decoder stream; ``conditioning`` is a stream :meth:`primed` already
        (a voice clone's), adopted as it is, or None."""
        if isinstance(conditioning, VocoderStream):
            return conditioning
        return VocoderStream(self.decoder.new_stream())

    @torch.no_grad()
    def primed(self, ref_codes: np.ndarray) -> VocoderStream:
        """A stream that has decoded a clone's reference codes (their audio dropped), so
        the context's audio continues the reference exactly as the reference model's
        does. Slow for long references: call it while preparing, off the engine thread."""
        stream = VocoderStream(self.decoder.new_stream())
        if len(ref_codes):
            codes = torch.from_numpy(np.asarray(ref_codes, np.int64))
            self.decoder.decode([codes], [stream.decoder])
        return stream

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        chunks, streams, rows = [], [], []
        out = [np.zeros(0, dtype=np.float32) for _ in items]
        for i, item in enumerate(items):
            chunk = np.asarray(item.frames[item.left : len(item.frames) - item.right], np.int64)
            if not len(chunk):
                continue
            stream = item.stream
            assert isinstance(stream, VocoderStream)
            chunks.append(torch.from_numpy(chunk))
            streams.append(stream.decoder)
            rows.append(i)
        if chunks:
            wavs = self.decoder.decode(chunks, streams)
            for row, wav in zip(rows, wavs, strict=True):
                out[row] = wav.float().cpu().numpy()
        return out
