"""The mechanics every PyAV-muxed encoder shares (Ogg/Opus, MP3, ADTS AAC, FLAC).

Float32 PCM is cut into frames of the codec's size, time-stamped, encoded and
muxed into a non-seekable sink; each call returns what the muxer wrote since
the last one, so the stream plays while it grows.
"""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np

from voiceserver.audio.encoders.base import FrameBuffer, clip_unit, float_to_s16
from voiceserver.audio.resample import as_mono_float32


class ByteSink:
    """Write-only, non-seekable file object: a muxer writes here as data completes
    (Ogg pages, MP3 frames...), and ``take`` hands out what arrived since last time."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._chunks.append(bytes(data))
        return len(data)

    def take(self) -> list[bytes]:
        """Everything written since the last call, as one payload (or none)."""
        data, self._chunks = b"".join(self._chunks), []
        return [data] if data else []


class MuxedEncoder:
    """Subclasses open ``self._sink`` as a container, add the stream, then call ``_start``."""

    sample_rate: int
    cheap = False
    """A codec and a muxer: worth a worker thread."""
    needs_audio = False
    """Emit one frame of silence for an empty stream (a format with no packet is invalid)."""

    def __init__(self) -> None:
        self._sink = ByteSink()

    def _start(
        self,
        container: av.container.OutputContainer,
        stream: av.audio.stream.AudioStream,
        sample_format: str,
        frame_size: int,
    ) -> None:
        self._container = container
        self._stream = stream
        self._sample_format = sample_format
        self._frames = FrameBuffer(frame_size)
        self._time_base = Fraction(1, self.sample_rate)
        self._samples_in = 0
        self._finished = False

    @property
    def samples_emitted(self) -> int:
        return self._samples_in

    def encode(self, pcm: np.ndarray) -> list[bytes]:
        if self._finished:
            raise RuntimeError("encode() after flush()")
        for frame in self._frames.push(as_mono_float32(pcm)):
            self._encode_frame(frame)
        return self._sink.take()

    def flush(self) -> list[bytes]:
        if self._finished:
            raise RuntimeError("flush() called twice")
        self._finished = True
        rest = self._frames.take_rest()
        if not len(rest) and self.needs_audio and self._samples_in == 0:
            rest = np.zeros(self._frames.frame_size, np.float32)
        if len(rest):
            self._encode_frame(rest)
        self._container.mux(self._stream.encode(None))
        self._container.close()
        return self._sink.take()

    def close(self) -> None:
        """Drop the stream without finishing it (a cancelled context or request)."""
        if not self._finished:
            self._finished = True
            self._container.close()
            self._sink.take()

    def _encode_frame(self, samples: np.ndarray) -> None:
        if self._sample_format == "s16":
            data = float_to_s16(samples)[None, :]
        else:
            data = np.ascontiguousarray(clip_unit(samples), dtype=np.float32)[None, :]
        frame = av.AudioFrame.from_ndarray(data, format=self._sample_format, layout="mono")
        frame.sample_rate = self.sample_rate
        frame.time_base = self._time_base
        frame.pts = self._samples_in
        self._samples_in += len(samples)
        self._container.mux(self._stream.encode(frame))
