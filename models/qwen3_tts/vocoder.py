"""Code2Wav behind the Vocoder interface: exact chunked decoding, batched over contexts.

Open streams are rows of one pooled :class:`DecoderState`, so a decode call
gathers and scatters every state buffer once however many streams it continues.
On CUDA the calls are replayed from graphs captured at start-up per chunk
length (1, 2, 4, 8, 16 frames, chunks right-padded) and batch bucket; the pool
then has a fixed size (graphs hold its buffers' addresses) plus a scratch row
for padding. Calls no graph covers run eagerly.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from models.base import DecodeItem, Vocoder
from models.cuda_graphs import BucketGraphs
from models.qwen3_tts.code2wav import Code2Wav, DecoderState
from models.upload import upload

log = logging.getLogger(__name__)

GRAPH_FRAMES = (1, 2, 4, 8, 16)
"""Chunk lengths with graphs (a chunk is padded to the next one)."""
GRAPH_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
GRAPH_MAX_FRAMES_PER_CALL = 1024
"""Larger calls (batch x chunk length) run eagerly: launches are a small part of them."""


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
        self,
        decoder: Code2Wav,
        sample_rate: int,
        samples_per_frame: int,
        rows: int = 1,
        graphs: bool = False,
    ) -> None:
        """``rows``: streams the pool has room for at first; it doubles when full (with
        ``graphs``, on CUDA: room for ``2 * rows`` and graphs captured; growing past
        that drops the graphs)."""
        self.decoder = decoder
        self.sample_rate = sample_rate
        self.samples_per_frame = samples_per_frame
        device = decoder.pre_conv.conv.weight.device
        use_graphs = graphs and device.type == "cuda"
        rows = max(1, 2 * rows if use_graphs else rows)
        self._pool = decoder.new_state(rows + 1 if use_graphs else rows)
        self._scratch = rows if use_graphs else -1
        self._free = list(range(rows - 1, -1, -1))
        # Closed streams' rows, zeroed before the next decode: one call for all of
        # them instead of one per stream opened on them.
        self._stale: set[int] = set()
        self._graphs: dict[int, BucketGraphs] = {}
        if use_graphs:
            self._capture(rows)

    def _capture(self, rows: int) -> None:
        groups = self.decoder.cfg.num_quantizers
        for frames in GRAPH_FRAMES:
            sizes = [
                b for b in GRAPH_BATCHES if b <= rows and b * frames <= GRAPH_MAX_FRAMES_PER_CALL
            ]
            if not sizes:
                continue

            def run(packed: torch.Tensor) -> torch.Tensor:
                return self.decoder.run_packed(packed, self._pool)

            def padding(size: int, frames: int = frames) -> tuple[torch.Tensor]:
                return (upload(self._padding(size, groups * frames + 4), self._pool.device),)

            self._graphs[frames] = BucketGraphs(run, padding, sizes)
            with torch.no_grad():
                self._graphs[frames].capture()

    def _padding(self, size: int, width: int) -> np.ndarray:
        """Rows that decode one frame of zeros into the scratch row."""
        pad = np.zeros((size, width), np.int64)
        pad[:, -4] = 1
        pad[:, -1] = self._scratch
        return pad

    def new_stream(self, conditioning: Any = None) -> VocoderStream:
        """A pooled stream. ``conditioning`` is a stream :meth:`primed` already (a voice
        clone's), whose state the new stream starts from, or None for a fresh one."""
        if not self._free:
            if self._graphs:
                log.warning(
                    "more vocoder streams than the graphs were sized for: eager from now on"
                )
                self._graphs.clear()
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
        wavs, samples = self._decode(chunks, np.array(rows, np.int64))
        host = wavs.float().cpu().numpy()
        for row, (i, n) in enumerate(zip(order, samples.tolist(), strict=True)):
            out[i] = host[row, :n]
        return out

    @torch.no_grad()
    def _decode(
        self, chunks: list[np.ndarray], rows: np.ndarray
    ) -> tuple[torch.Tensor, np.ndarray]:
        """Every chunk's audio [B, max T_i * hop] and its valid samples. With graphs,
        chunks go by the graph length they pad to (1, 2, 4, 8, 16 frames), each group
        in replays of at most its largest batch: a call mixing a newcomer's 1-frame
        chunk with 16-frame ones would otherwise pad every chunk to 16 frames, or
        (past 1,024 frames) run eagerly. Chunks longer than any graph run eagerly."""
        counts = np.array([len(c) for c in chunks], np.int64)
        if not self._graphs:
            return self.decoder.decode(chunks, self._pool, rows)
        hop = self.decoder.hop
        lengths = np.array([next((f for f in GRAPH_FRAMES if f >= n), 0) for n in counts])
        wavs = torch.zeros(len(chunks), int(counts.max()) * hop, device=self._pool.device)
        for frames in np.unique(lengths).tolist():
            group = np.flatnonzero(lengths == frames)
            graphs = self._graphs.get(frames)
            if graphs is None:  # longer than any graph
                wav, _ = self.decoder.decode([chunks[i] for i in group], self._pool, rows[group])
                wavs[upload(group, wavs.device), : wav.shape[1]] = wav.to(wavs.dtype)
                continue
            for first in range(0, len(group), graphs.largest):
                part = group[first : first + graphs.largest]
                size = graphs.bucket_for(len(part))
                assert size is not None
                packed = self.decoder.pack(
                    [chunks[i] for i in part], self._pool, rows[part], frames
                )
                padded = self._padding(size, packed.shape[1])
                padded[: len(part)] = packed
                wav = graphs.replay(upload(padded, self._pool.device))[: len(part)]
                self.decoder.advance(self._pool, rows[part], counts[part])
                width = min(wav.shape[1], wavs.shape[1])
                wavs[upload(part, wavs.device), :width] = wav[:, :width].to(wavs.dtype)
        return wavs, counts * hop
