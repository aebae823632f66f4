"""FrameRing: every stream's frames between the model and the vocoder, in one array.

A stream's frames live in row ``stream`` of a ``[streams, capacity, frame_dim]``
ring, frame ``f`` at column ``f % capacity``. A step's frames for many streams
are written with one indexed assignment; a decode window is read with one
``take``. Units (stretches the vocoder must not look across, e.g. Piper's
sentences) are kept as absolute frame positions: the head unit of each stream
in arrays (``unit_start``, ``unit_end``, -1 while it is open), later closed
units in a small per-stream queue, touched only when a unit ends.

The ring never overwrites a frame the vocoder still needs: ``room`` says how
many frames a stream can take, and the engine does not step a stream without
room for a whole step.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np


class FrameRing:
    def __init__(self, streams: int, capacity: int, frame_dim: int, dtype: Any) -> None:
        self.capacity = capacity
        self.buffer = np.zeros((streams, capacity, frame_dim), dtype=dtype)
        self._rows = self.buffer.reshape(streams * capacity, frame_dim)
        self.produced = np.zeros(streams, np.int64)
        """Absolute count of frames written to each stream."""
        self.unit_start = np.zeros(streams, np.int64)
        self.unit_end = np.full(streams, -1, np.int64)
        """End of each stream's head unit, or -1 while it is still being written."""
        self._open_start = np.zeros(streams, np.int64)
        """Start of the unit being written (later than the head when units queue up)."""
        self._closed: list[deque[tuple[int, int]]] = [deque() for _ in range(streams)]

    def reset(self, stream: int) -> None:
        self.produced[stream] = 0
        self.unit_start[stream] = 0
        self.unit_end[stream] = -1
        self._open_start[stream] = 0
        self._closed[stream].clear()

    def append(
        self, streams: np.ndarray, counts: np.ndarray, frames: np.ndarray, unit_end: np.ndarray
    ) -> None:
        """Write each stream's new frames (``counts`` rows of ``frames`` each, back to
        back); close the unit of rows whose ``unit_end`` is set."""
        if len(streams) and np.all(counts == 1):
            produced = self.produced[streams]
            self._rows[streams * self.capacity + produced % self.capacity] = frames
            self.produced[streams] = produced + 1
        else:
            offset = 0
            for stream, count in zip(streams.tolist(), counts.tolist(), strict=True):
                if count:
                    columns = (self.produced[stream] + np.arange(count)) % self.capacity
                    self.buffer[stream, columns] = frames[offset : offset + count]
                    self.produced[stream] += count
                    offset += count
        if unit_end.any():
            for stream in streams[unit_end].tolist():
                self.close_unit(stream)

    def close_unit(self, stream: int) -> None:
        """The unit being written ends at the stream's last frame."""
        start, end = int(self._open_start[stream]), int(self.produced[stream])
        if end == start:
            return  # an empty unit: nothing to bound
        self._open_start[stream] = end
        if self.unit_end[stream] < 0 and self.unit_start[stream] == start:
            self.unit_end[stream] = end
        else:
            self._closed[stream].append((start, end))

    def advance_unit(self, stream: int) -> None:
        """The vocoder finished the head unit: the next one (or the open one) is head."""
        if self._closed[stream]:
            start, end = self._closed[stream].popleft()
            self.unit_start[stream], self.unit_end[stream] = start, end
        else:
            self.unit_start[stream] = self._open_start[stream]
            self.unit_end[stream] = -1

    def window(self, stream: int, start: int, end: int) -> np.ndarray:
        """Frames ``[start, end)`` of a stream (absolute positions, still in the ring).
        A view where the range does not wrap: valid until the stream's next frames
        are written (a decode call uses it at once)."""
        lo = start % self.capacity
        if lo + (end - start) <= self.capacity:
            return self.buffer[stream, lo : lo + end - start]
        columns = np.arange(start, end) % self.capacity
        return self.buffer[stream, columns]

    def room(self, streams: np.ndarray, keep_from: np.ndarray) -> np.ndarray:
        """Frames each stream can still take without overwriting ``keep_from`` onwards."""
        return self.capacity - (self.produced[streams] - keep_from)
