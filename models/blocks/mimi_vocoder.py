"""Kyutai's Mimi behind the Vocoder interface: streamed, batched, exact (a kit block; VoXtream2
decodes its frames' 16 codebooks with it).

Mimi is causal throughout and its streamed state is kept (convolution histories,
transposed convolutions' spill, the decoder transformer's last 249 keys and values),
so a chunk needs no frames around it (``left_context = right_context = 0``) and
streamed audio equals decoding the whole sequence, whatever the chunking
(:mod:`models.blocks.mimi_stream`). Open streams are rows of one fixed pool of
device tables: a decode call continues every item's stream at its own position in
one batch, chunks of different lengths right-padded to the longest.

VoXtream's generator decodes with moshi's streaming, one frame a call; moshi's ring
cache then drops a frame's first step's oldest key once a stream passes 250 steps
(10 s), which whole-sequence decoding does not. The default ``window="moshi"``
reproduces that, whatever the engine's chunking, so the audio is the reference's;
``window="exact"`` decodes what the whole sequence decodes instead.

On CUDA with ``graphs``, calls replay CUDA graphs captured at start-up per chunk
length (1, 2, 4, ... 32 frames, chunks right-padded) and batch bucket; calls no graph
covers run eagerly. A call reads nothing from the device but its audio.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.base import DecodeItem, Vocoder
from models.blocks.mimi import Mimi, load_mimi
from models.blocks.mimi_stream import MimiStreams
from models.cuda_graphs import BucketGraphs, default_buckets
from models.upload import upload

log = logging.getLogger(__name__)

NUM_CODEBOOKS = 16
"""Codebooks a frame holds by default (VoXtream's: Mimi's first 16, codebook 0 first)."""
GRAPH_FRAMES = (1, 2, 4, 8, 16, 32)
"""Chunk lengths with graphs (a chunk is padded to the next one)."""
GRAPH_MAX_FRAMES_PER_CALL = 512
"""Larger calls (batch x chunk length) run eagerly: launches are a small part of them."""


@dataclass
class MimiStream:
    """An open stream's row of the vocoder's pool (-1 once closed)."""

    row: int


class MimiVocoder(Vocoder):
    right_context = 0
    left_context = 0

    def __init__(
        self, mimi: Mimi, max_streams: int, *, graphs: bool = False, window: str = "moshi"
    ) -> None:
        """``mimi``: the codec (its decoder at least) with the frames' codebooks;
        ``max_streams``: streams open at once (the engine opens up to twice its
        runner's slots: a stream may still be decoding after its context left its
        slot); ``graphs``: capture CUDA graphs (on CUDA only); ``window``: "exact" or
        "moshi" (see the module's doc)."""
        if max_streams < 1:
            raise ValueError(f"max_streams must be at least 1, got {max_streams}")
        self.mimi = mimi
        self.sample_rate = mimi.sample_rate
        self.samples_per_frame = mimi.samples_per_frame
        self.pool = MimiStreams(mimi, max_streams, window=window)
        self._free = list(range(max_streams - 1, -1, -1))
        # Closed streams' rows, made fresh before the next decode: one fill per table
        # for all of them instead of one per stream opened on them.
        self._stale: set[int] = set()
        self._graphs: dict[int, BucketGraphs] = {}
        if graphs and self.pool.device.type == "cuda":
            self._capture(max_streams)

    @classmethod
    def from_file(
        cls,
        path: Path | str,
        max_streams: int,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        graphs: bool = False,
        window: str = "moshi",
        num_codebooks: int = NUM_CODEBOOKS,
    ) -> MimiVocoder:
        """The vocoder of a Kyutai Mimi file (its decoder half, ``num_codebooks``)."""
        mimi = load_mimi(path, num_codebooks, device=device, dtype=dtype, encoder=False)
        return cls(mimi, max_streams, graphs=graphs, window=window)

    @property
    def max_streams(self) -> int:
        return self.pool.rows

    def _capture(self, rows: int) -> None:
        pool = self.pool
        for frames in GRAPH_FRAMES:
            sizes = [b for b in default_buckets(rows) if b * frames <= GRAPH_MAX_FRAMES_PER_CALL]
            if not sizes:
                continue

            def padding(size: int, frames: int = frames) -> tuple[torch.Tensor]:
                return (upload(pool.padding(size, frames), pool.device),)

            self._graphs[frames] = BucketGraphs(pool.run_packed, padding, sizes)
            with torch.no_grad():
                self._graphs[frames].capture()

    def new_stream(self, conditioning: Any = None) -> MimiStream:
        """A fresh stream (VoXtream decodes only generated frames, never a prompt's:
        ``conditioning`` is not used). RuntimeError when every row is taken."""
        if not self._free:
            raise RuntimeError(
                f"all {self.max_streams} Mimi vocoder streams are open: size max_streams "
                "for the streams the engine keeps open (twice its runner's slots)"
            )
        return MimiStream(self._free.pop())

    def close_stream(self, stream: Any) -> None:
        if isinstance(stream, MimiStream) and stream.row >= 0:
            self._free.append(stream.row)
            self._stale.add(stream.row)
            stream.row = -1

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        out = [np.zeros(0, np.float32) for _ in items]
        chunks, rows, order = [], [], []
        for i, item in enumerate(items):
            chunk = np.asarray(item.frames[item.left : len(item.frames) - item.right])
            if not len(chunk):
                continue
            stream = item.stream
            if not isinstance(stream, MimiStream) or stream.row < 0:
                raise ValueError("decode needs an open stream from new_stream")
            chunks.append(chunk)
            rows.append(stream.row)
            order.append(i)
        if not chunks:
            return out
        counts = np.array([len(c) for c in chunks], np.int64)
        all_rows = np.array(rows, np.int64)
        # Chunks of similar lengths decode together, padded to their group's length
        # (a power of two up to 32 frames, or the longest beyond): a 1-frame chunk is
        # never padded to a 32-frame one (on CPU at the real size that padding doubles
        # a call's cost: 483 ms for 1 + 32 frames together, 282 ms apart).
        groups: dict[int, list[int]] = {}
        for b, n in enumerate(counts.tolist()):
            bucket = next((f for f in GRAPH_FRAMES if f >= n), 0)
            groups.setdefault(bucket, []).append(b)
        if self._stale:  # before packing: a reopened row starts at position 0
            self.pool.reset(np.array(sorted(self._stale), np.int64))
            self._stale.clear()
        plans = []
        for bucket, members in sorted(groups.items()):
            index = np.array(members, np.int64)
            frames = bucket or int(counts[index].max())
            # Packing checks every chunk before any stream moves on.
            packed = self.pool.pack([chunks[b] for b in members], all_rows[index], frames)
            plans.append((index, frames, packed))
        parts = []
        for index, frames, packed in plans:
            parts.append(self._run(packed, frames).reshape(-1))
            self.pool.advance(all_rows[index], counts[index])
        # One copy to the host for the whole call.
        host = torch.cat(parts).float().clamp(-1.0, 1.0).cpu().numpy()
        hop, offset = self.samples_per_frame, 0
        for index, frames, _ in plans:
            for j, b in enumerate(index.tolist()):
                start = offset + j * frames * hop
                out[order[b]] = host[start : start + counts[b] * hop]
            offset += len(index) * frames * hop
        return out

    @torch.no_grad()
    def _run(self, packed: np.ndarray, frames: int) -> torch.Tensor:
        """Audio [B, frames * 1920] on the device for one group's packed rows: a graph
        replay when one covers them, else eagerly."""
        pool = self.pool
        graphs = self._graphs.get(frames)
        size = graphs.bucket_for(len(packed)) if graphs is not None else None
        if graphs is None or size is None:
            return pool.run_packed(upload(packed, pool.device))
        padded = pool.padding(size, frames)
        padded[: len(packed)] = packed
        return graphs.replay(upload(padded, pool.device))[: len(packed)]
