"""Code2Wav behind the Vocoder interface: exact chunked decoding, batched over contexts.

Open streams are rows of one pooled :class:`DecoderState`, so a decode call
gathers and scatters every state buffer once however many streams it continues.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from models.base import DecodeItem, Vocoder
from models.qwen3_tts.code2wav import Code2Wav, DecoderState


@dataclass
class VocoderStream:
    """Row ``row`` of ``state``: the vocoder's pool for an open stream (-1 once
    closed), or a primed stream's own one-row state."""

    state: DecoderState
    row: int


class Qwen3Vocoder(Vocoder):
    right_context = 0
    left_context = 0

    def __init__(
        self, decoder: Code2Wav, sample_rate: int, samples_per_frame: int, rows: int = 1
    ) -> None:
        """``rows``: streams the pool has room for at first; it doubles when full."""
        self.decoder = decoder
        self.sample_rate = sample_rate
        self.samples_per_frame = samples_per_frame
        self._pool = decoder.new_state(max(1, rows))
        self._free = list(range(self._pool.rows - 1, -1, -1))
        # Closed streams' rows, zeroed before the next decode: one call for all of
        # them instead of one per stream opened on them.
        self._stale: set[int] = set()

    def new_stream(self, conditioning: Any = None) -> VocoderStream:
        """A pooled stream. ``conditioning`` is a stream :meth:`primed` already (a voice
        clone's), whose state the new stream starts from, or None for a fresh one."""
        if not self._free:
            rows = self._pool.rows
            self._pool.grow(2 * rows)
            self._free.extend(range(2 * rows - 1, rows - 1, -1))
        row = self._free.pop()
        if isinstance(conditioning, VocoderStream):
            self._pool.copy_row(row, conditioning.state, conditioning.row)
            self._stale.discard(row)
        return VocoderStream(self._pool, row)

    def close_stream(self, stream: Any) -> None:
        if isinstance(stream, VocoderStream) and stream.state is self._pool and stream.row >= 0:
            self._free.append(stream.row)
            self._stale.add(stream.row)
            stream.row = -1

    @torch.no_grad()
    def primed(self, ref_codes: np.ndarray) -> VocoderStream:
        """A stream that has decoded a clone's reference codes (their audio dropped), so
        the context's audio continues the reference exactly as the reference model's
        does. Its state is its own, outside the pool (it is made on a worker thread
        while the engine decodes): pass it to :meth:`new_stream`. Slow for long
        references: call it while preparing, off the engine thread."""
        stream = VocoderStream(self.decoder.new_state(1), 0)
        if len(ref_codes):
            codes = np.asarray(ref_codes, np.int64)
            self.decoder.decode([codes], stream.state, np.zeros(1, np.int64))
        return stream

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        chunks, rows, order = [], [], []
        out = [np.zeros(0, dtype=np.float32) for _ in items]
        for i, item in enumerate(items):
            chunk = np.asarray(item.frames[item.left : len(item.frames) - item.right], np.int64)
            if not len(chunk):
                continue
            stream = item.stream
            if not (
                isinstance(stream, VocoderStream) and stream.state is self._pool and stream.row >= 0
            ):
                raise ValueError("decode needs an open stream from new_stream")
            chunks.append(chunk)
            rows.append(stream.row)
            order.append(i)
        if not chunks:
            return out
        if self._stale:
            self._pool.reset(np.array(sorted(self._stale), np.int64))
            self._stale.clear()
        wavs, samples = self.decoder.decode(chunks, self._pool, np.array(rows, np.int64))
        host = wavs.float().cpu().numpy()
        for row, (i, n) in enumerate(zip(order, samples.tolist(), strict=True)):
            out[i] = host[row, :n]
        return out
