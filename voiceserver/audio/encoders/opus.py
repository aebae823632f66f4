"""Raw Opus: exactly one packet per `frame_ms` frame, from one libopus encoder per context."""

from __future__ import annotations

import numpy as np

from voiceserver.audio.encoders.base import FrameBuffer, clip_unit
from voiceserver.audio.format import DEFAULT_OPUS_BITRATE, DEFAULT_OPUS_FRAME_MS

try:
    import opuslib
except Exception as exc:  # opuslib raises a bare Exception when libopus is absent
    raise ImportError(
        "raw Opus needs the system libopus (Debian/Ubuntu: apt-get install libopus0)"
    ) from exc

# "audio" rather than "voip": synthetic speech is clean, so voip's speech
# enhancement (high-pass, intelligibility-first tuning) only costs fidelity;
# measured against the input it gives clearly lower waveform SNR at every rate.
_APPLICATIONS = {
    "audio": opuslib.APPLICATION_AUDIO,
    "voip": opuslib.APPLICATION_VOIP,
    "lowdelay": opuslib.APPLICATION_RESTRICTED_LOWDELAY,
}


class OpusPacketEncoder:
    """Float32 mono PCM -> Opus packets, one payload per packet.

    The last frame of the context is padded with silence, so a context of
    `n` samples yields ceil(n / frame_size) packets. The decoder's output lags
    the input by the encoder's lookahead (`lookahead` samples, 6.5 ms), so
    the last few ms of a frame that ends exactly at the end of the audio play
    only if more audio or padding follows; TTS audio ends in silence anyway.
    """

    content_type = "audio/opus"
    cheap = False
    """libopus costs ~0.1 ms per 20 ms frame: worth a worker thread."""

    def __init__(
        self,
        sample_rate: int,
        frame_ms: int = DEFAULT_OPUS_FRAME_MS,
        bitrate: int | None = None,
        application: str = "audio",
        complexity: int | None = None,
    ) -> None:
        if application not in _APPLICATIONS:
            raise ValueError(f"application must be one of {sorted(_APPLICATIONS)}")
        self.sample_rate = sample_rate
        self.frame_ms = frame_ms
        self.frame_size = sample_rate * frame_ms // 1000
        self.bitrate = bitrate or DEFAULT_OPUS_BITRATE[sample_rate]
        self._encoder = opuslib.Encoder(sample_rate, 1, _APPLICATIONS[application])
        self._encoder.bitrate = self.bitrate
        if complexity is not None:
            self._encoder.complexity = complexity
        self.lookahead: int = self._encoder.lookahead
        self._frames = FrameBuffer(self.frame_size)
        self._packets = 0
        self._finished = False

    @property
    def samples_emitted(self) -> int:
        return self._packets * self.frame_size

    def encode(self, pcm: np.ndarray) -> list[bytes]:
        if self._finished:
            raise RuntimeError("encode() after flush()")
        return [self._encode_frame(frame) for frame in self._frames.push(pcm)]

    def emit_partial(self) -> list[bytes]:
        """At a flush point: send the incomplete frame now, padded with silence
        (at most one frame of silence, where the speech has paused anyway)."""
        rest = self._frames.take_rest()
        if self._finished or not len(rest):
            return []
        padded = np.zeros(self.frame_size, dtype=np.float32)
        padded[: len(rest)] = rest
        return [self._encode_frame(padded)]

    def close(self) -> None:
        """Drop what is buffered without emitting it (a cancelled context)."""
        self._finished = True

    def flush(self) -> list[bytes]:
        if self._finished:
            raise RuntimeError("flush() called twice")
        packets = self.emit_partial()
        self._finished = True
        return packets

    def _encode_frame(self, frame: np.ndarray) -> bytes:
        data = clip_unit(frame).astype(np.float32).tobytes()
        packet = self._encoder.encode_float(data, self.frame_size)
        self._packets += 1
        return bytes(packet)
