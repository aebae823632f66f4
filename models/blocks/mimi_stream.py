"""Streamed Mimi decoding for many streams at once, each at its own position.

A :class:`MimiStreams` pool holds the decoder state of ``rows`` streams in device
tables (:class:`models.kit.tables.SlotTables`, one row per stream plus a scratch
row that padding rows use): every causal conv's last inputs, every transposed
conv's spill, and the decoder transformer's ring of keys and values (the steps a
next step can still see, 249 at 25 Hz). A stream holds one row; a call continues
any set of rows, each by its own chunk: chunks of different lengths are right-padded
to the longest (causal layers never let the padding reach a real output, and what a
row keeps is taken at its own length). Streamed audio equals whole-sequence
decoding within float32 rounding, whatever the chunking (``window="exact"``), or
moshi's streaming of one frame per call, whatever the chunking (``window="moshi"``:
see :mod:`models.blocks.mimi_transformer`).

A call's host inputs are packed into one int64 array (:meth:`MimiStreams.pack`):
the device side (:meth:`MimiStreams.run_packed`) reads no host value, so a CUDA
graph can capture it per chunk length and batch size; the host side keeps each
row's position (:meth:`MimiStreams.advance`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from models.blocks.mimi import Mimi
from models.blocks.mimi_conv import Stateful, StreamRows
from models.blocks.mimi_transformer import WINDOWS
from models.kit.tables import SlotTables
from models.upload import upload

PACKED_TAIL = 3
"""Host values after a row's codes: its chunk length, its position (frames decoded
before the chunk) and its state row."""


class MimiStreams:
    def __init__(self, mimi: Mimi, rows: int, *, window: str = "exact") -> None:
        """Room for ``rows`` streams of ``mimi``'s decoder, all fresh."""
        if not mimi.has_decoder:
            raise ValueError("streamed decoding needs a Mimi loaded with its decoder")
        if window not in WINDOWS:
            raise ValueError(f"window must be one of {WINDOWS}, got {window!r}")
        if rows < 1:
            raise ValueError(f"rows must be at least 1, got {rows}")
        self.mimi = mimi
        self.window = window
        columns = {}
        for part in (mimi.upsample, mimi.decoder_transformer, mimi.decoder):
            for module in part.modules():
                if isinstance(module, Stateful):
                    columns.update(module.state_columns(mimi.dtype))
        self.tables = SlotTables(rows, mimi.device, columns)
        self.position = np.zeros(rows + 1, np.int64)

    @property
    def rows(self) -> int:
        return self.tables.slots

    @property
    def scratch(self) -> int:
        """The row padding rows of a call decode into."""
        return self.tables.scratch

    @property
    def device(self) -> torch.device:
        return self.tables.device

    def reset(self, rows: Sequence[int] | np.ndarray) -> None:
        """Make ``rows`` fresh streams (one fill per table for all of them)."""
        rows = np.asarray(rows, np.int64)
        if len(rows):
            self.tables.reset(rows, *self.tables.columns)
            self.position[rows] = 0

    def pack(self, chunks: Sequence[np.ndarray], rows: np.ndarray, frames: int) -> np.ndarray:
        """One call's host inputs [B, K * frames + 3] int64: row b's codes (chunks[b],
        [n_b, K], codebook 0 first) right-padded to ``frames``, codebook-major, then
        n_b, its stream position and its state row. Codes out of range are refused
        here: on a GPU they would trip a device assert that ends every stream."""
        k = self.mimi.num_codebooks
        size = self.mimi.cfg.codebook_size
        packed = np.zeros((len(chunks), k * frames + PACKED_TAIL), np.int64)
        codes = packed[:, : k * frames].reshape(len(chunks), k, frames)
        for b, chunk in enumerate(chunks):
            chunk = np.asarray(chunk)
            if chunk.ndim != 2 or chunk.shape[1] != k or not 1 <= len(chunk) <= frames:
                raise ValueError(
                    f"chunk {b} must be [frames, {k}] with 1 to {frames} frames, got {chunk.shape}"
                )
            if chunk.min() < 0 or chunk.max() >= size:
                raise ValueError(f"codes must be in [0, {size}), chunk {b} has {chunk.min()}..")
            codes[b, :, : len(chunk)] = chunk.T
        rows = np.asarray(rows, np.int64)
        packed[:, -3] = [len(c) for c in chunks]
        packed[:, -2] = self.position[rows]
        packed[:, -1] = rows
        return packed

    def padding(self, size: int, frames: int) -> np.ndarray:
        """``size`` rows that decode one frame of code 0 into the scratch row."""
        pad = np.zeros((size, self.mimi.num_codebooks * frames + PACKED_TAIL), np.int64)
        pad[:, -3] = 1
        pad[:, -1] = self.scratch
        return pad

    def run_packed(self, packed: torch.Tensor) -> torch.Tensor:
        """The device side of a call on :meth:`pack`'s array: audio [B, frames * 1920]
        (row b's first n_b * 1920 samples real). Reads no host value."""
        mimi = self.mimi
        k = mimi.num_codebooks
        b = packed.shape[0]
        frames = (packed.shape[1] - PACKED_TAIL) // k
        codes = packed[:, : k * frames].reshape(b, k, frames)
        lengths, starts, index = packed[:, -PACKED_TAIL:].unbind(1)
        rows = StreamRows(self.tables, index)
        stride = mimi.cfg.resample_stride
        x = mimi.quantizer.decode(codes).to(mimi.dtype)
        x = mimi.upsample.convtr.step(x, lengths, rows)
        steps = lengths * stride
        x = mimi.decoder_transformer.step(x, steps, starts * stride, rows, self.window, stride)
        return mimi.decoder.step(x, steps, rows)[:, 0]

    def advance(self, rows: np.ndarray, counts: np.ndarray) -> None:
        """The host side of a call: rows ``rows`` moved on by ``counts`` frames."""
        self.position[np.asarray(rows, np.int64)] += counts

    @torch.no_grad()
    def decode(
        self, chunks: Sequence[np.ndarray], rows: Sequence[int] | np.ndarray
    ) -> tuple[torch.Tensor, np.ndarray]:
        """Continue stream ``rows[b]`` by ``chunks[b]`` (int [n_b, K]). Returns the audio
        [B, max n_b * 1920] on the device and each row's real sample count."""
        rows = np.asarray(rows, np.int64)
        if len(set(rows.tolist())) != len(rows) or rows.min() < 0 or rows.max() >= self.rows:
            raise ValueError(f"rows must be distinct, from 0 to {self.rows - 1}")
        counts = np.array([len(c) for c in chunks], np.int64)
        packed = self.pack(chunks, rows, int(counts.max()))
        audio = self.run_packed(upload(packed, self.device))
        self.advance(rows, counts)
        return audio, counts * self.mimi.samples_per_frame
