"""Ogg/Opus (RFC 7845) through FFmpeg's libopus encoder and Ogg muxer (PyAV).

Pages are handed out as the muxer completes them, so the stream plays while it
grows. The muxer keeps the newest page until the next packet (or the end) so it
can mark the final page EOS: a page reaches the client one frame late.
"""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np

from voiceserver.audio.encoders.base import FrameBuffer, clip_unit
from voiceserver.audio.format import DEFAULT_OPUS_BITRATE, DEFAULT_OPUS_FRAME_MS


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


class OggOpusEncoder:
    """Float32 mono PCM -> an Ogg/Opus byte stream that a stock decoder plays.

    Unlike raw Opus, the end is exact: the last packet is short and the final
    granule position trims the padding, so the stream decodes to exactly the
    samples it was given (pre-skip hides the encoder delay at the start).
    `page_ms` trades latency for the 27+ bytes each page costs; by default
    every packet closes its page.
    """

    content_type = "audio/ogg;codecs=opus"

    def __init__(
        self,
        sample_rate: int,
        frame_ms: int = DEFAULT_OPUS_FRAME_MS,
        bitrate: int | None = None,
        application: str = "audio",
        page_ms: int | None = None,
        complexity: int | None = None,
    ) -> None:
        self.sample_rate = sample_rate
        self.frame_ms = frame_ms
        self.frame_size = sample_rate * frame_ms // 1000
        self.bitrate = bitrate or DEFAULT_OPUS_BITRATE[sample_rate]
        self._sink = ByteSink()
        self._container = av.open(
            self._sink,
            "w",
            format="ogg",
            options={"page_duration": str((page_ms or frame_ms) * 1000), "flush_packets": "1"},
        )
        # Same application as the raw encoder: see opus.py for why "audio".
        codec_options = {"application": application, "frame_duration": str(frame_ms)}
        if complexity is not None:
            codec_options["compression_level"] = str(complexity)
        self._stream = self._container.add_stream(
            "libopus", rate=sample_rate, layout="mono", options=codec_options
        )
        self._stream.codec_context.format = "flt"
        self._stream.bit_rate = self.bitrate
        self._time_base = Fraction(1, sample_rate)
        self._frames = FrameBuffer(self.frame_size)
        self._samples_in = 0
        self._finished = False

    @property
    def samples_emitted(self) -> int:
        return self._samples_in

    def encode(self, pcm: np.ndarray) -> list[bytes]:
        if self._finished:
            raise RuntimeError("encode() after flush()")
        for frame in self._frames.push(pcm):
            self._encode_frame(frame)
        return self._sink.take()

    def flush(self) -> list[bytes]:
        if self._finished:
            raise RuntimeError("flush() called twice")
        self._finished = True
        rest = self._frames.take_rest()
        if len(rest) or self._samples_in == 0:
            # A stream with no audio packet is not a valid Ogg/Opus file: send one frame of silence.
            self._encode_frame(rest if len(rest) else np.zeros(self.frame_size, np.float32))
        self._container.mux(self._stream.encode(None))
        self._container.close()
        return self._sink.take()

    def close(self) -> None:
        """Drop the stream without finishing it (a cancelled context)."""
        if not self._finished:
            self._finished = True
            self._container.close()
            self._sink.take()

    def _encode_frame(self, frame: np.ndarray) -> None:
        samples = np.ascontiguousarray(clip_unit(frame), dtype=np.float32)[None, :]
        av_frame = av.AudioFrame.from_ndarray(samples, format="flt", layout="mono")
        av_frame.sample_rate = self.sample_rate
        av_frame.time_base = self._time_base
        av_frame.pts = self._samples_in
        self._samples_in += len(frame)
        self._container.mux(self._stream.encode(av_frame))
