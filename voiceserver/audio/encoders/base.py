"""What every encoder offers, and the frame buffer the framed ones share."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Encoder(Protocol):
    """Turns float32 mono PCM at `sample_rate` into payloads, one binary frame each.

    One instance serves one context, so its output is one continuous stream.
    `samples_emitted` counts the output-rate samples that the payloads returned so
    far will play for (Opus padding included; for Ogg, pages still held by the
    muxer are counted once their packet is encoded).
    """

    content_type: str
    sample_rate: int
    cheap: bool
    """Encoding costs about what copying the samples does (numpy, or a
    sample-by-sample codec): less than a hop to a worker thread and back."""

    @property
    def samples_emitted(self) -> int: ...

    def encode(self, pcm: np.ndarray) -> list[bytes]: ...

    def flush(self) -> list[bytes]:
        """End of the context: emit everything still buffered (padding as the format needs)."""
        ...

    def close(self) -> None:
        """Release resources without emitting anything (a cancelled context)."""
        ...


def clip_unit(pcm: np.ndarray) -> np.ndarray:
    return np.clip(pcm, -1.0, 1.0)


def float_to_s16(pcm: np.ndarray) -> np.ndarray:
    """Scale by 32767 so that +-1.0 map symmetrically and nothing wraps."""
    return np.rint(clip_unit(pcm) * 32767.0).astype("<i2")


class FrameBuffer:
    """Collects samples and hands them out in frames of exactly `frame_size`."""

    def __init__(self, frame_size: int) -> None:
        if frame_size <= 0:
            raise ValueError(f"frame_size must be positive, got {frame_size}")
        self.frame_size = frame_size
        self._pending = np.zeros(0, dtype=np.float32)

    @property
    def pending(self) -> int:
        """Samples waiting for their frame to fill up."""
        return len(self._pending)

    def push(self, pcm: np.ndarray) -> list[np.ndarray]:
        """Add samples; return every complete frame now available."""
        data = np.concatenate((self._pending, pcm)) if len(self._pending) else pcm
        whole = len(data) - len(data) % self.frame_size
        self._pending = np.array(data[whole:], dtype=np.float32)
        return [data[i : i + self.frame_size] for i in range(0, whole, self.frame_size)]

    def take_rest(self) -> np.ndarray:
        """Remove and return the incomplete frame (maybe empty)."""
        rest, self._pending = self._pending, np.zeros(0, dtype=np.float32)
        return rest
