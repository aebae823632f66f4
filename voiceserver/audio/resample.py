"""Streaming sample-rate conversion of one continuous mono signal (libsoxr)."""

from __future__ import annotations

import numpy as np
import soxr

_EMPTY = np.zeros(0, dtype=np.float32)


def as_mono_float32(x: np.ndarray) -> np.ndarray:
    """View `x` as a 1-D float32 array; anything but mono is a caller bug."""
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"expected mono 1-D audio, got shape {x.shape}")
    return x.astype(np.float32, copy=False)


class StreamResampler:
    """Resample chunks of one stream so that their concatenation equals a one-shot resample.

    libsoxr works in blocks, so `process` returns nothing until roughly 40 ms (90 ms
    when going down to 8 kHz) of input has arrived, and later calls lag by about
    that much; `flush` returns the rest. Equal rates pass audio through untouched.
    Not thread-safe; use it from one thread at a time.
    """

    def __init__(self, in_rate: int, out_rate: int, quality: str = "HQ") -> None:
        if in_rate <= 0 or out_rate <= 0:
            raise ValueError(f"sample rates must be positive, got {in_rate} -> {out_rate}")
        self.in_rate = in_rate
        self.out_rate = out_rate
        self.samples_in = 0
        self.samples_out = 0
        self._finished = False
        self._stream: soxr.ResampleStream | None = None
        self._quality = quality
        if in_rate != out_rate:
            self._stream = soxr.ResampleStream(
                in_rate, out_rate, 1, dtype="float32", quality=quality
            )

    @property
    def passthrough(self) -> bool:
        return self._stream is None

    def process(self, x: np.ndarray) -> np.ndarray:
        """Feed the next chunk; return the output samples that are ready (maybe none)."""
        if self._finished:
            raise RuntimeError("StreamResampler.process() after flush()")
        x = as_mono_float32(x)
        self.samples_in += len(x)
        if self._stream is None:
            out = x
        elif len(x) == 0:
            out = _EMPTY
        else:
            out = self._stream.resample_chunk(np.ascontiguousarray(x))
        self.samples_out += len(out)
        return out

    def flush(self) -> np.ndarray:
        """End the stream and return the samples still held by the filter."""
        if self._finished:
            raise RuntimeError("StreamResampler.flush() called twice")
        self._finished = True
        if self._stream is None:
            return _EMPTY
        out = self._stream.resample_chunk(_EMPTY, last=True)
        self.samples_out += len(out)
        return out

    def drain(self) -> np.ndarray:
        """Return everything held by the filter now and carry on with a fresh one.

        For flush points, where the model has gone quiet: the listener must get
        all audio so far. The filter restarts from silence, which is inaudible
        where speech paused anyway.
        """
        if self._stream is None or self._finished:
            return _EMPTY
        out = self._stream.resample_chunk(_EMPTY, last=True)
        self.samples_out += len(out)
        self._stream = soxr.ResampleStream(
            self.in_rate, self.out_rate, 1, dtype="float32", quality=self._quality
        )
        return out
