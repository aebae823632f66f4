"""Code2Wav behind the Vocoder interface: exact chunked decoding, batched over contexts."""

from __future__ import annotations

from dataclasses import dataclass

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

    def new_stream(self) -> VocoderStream:
        return VocoderStream(self.decoder.new_stream())

    def prime(self, stream: VocoderStream, frames: np.ndarray) -> None:
        """Run ``frames`` through the stream and drop their audio (voice-clone reference)."""
        if len(frames):
            self.decoder.decode([torch.from_numpy(np.asarray(frames, np.int64))], [stream.decoder])

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        chunks, streams, rows = [], [], []
        out = [np.zeros(0, dtype=np.float32) for _ in items]
        for i, item in enumerate(items):
            lo, hi = item.start - item.frames_offset, item.end - item.frames_offset
            chunk = np.asarray(item.frames[lo:hi], dtype=np.int64)
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
