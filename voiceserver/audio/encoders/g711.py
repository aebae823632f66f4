"""G.711 mu-law / A-law companding through FFmpeg's codecs (PyAV)."""

from __future__ import annotations

import av
import numpy as np

from voiceserver.audio.encoders.base import float_to_s16

G711_CODECS = {"pcm_mulaw": "pcm_mulaw", "pcm_alaw": "pcm_alaw"}


class G711Converter:
    """Float32 samples -> one G.711 byte per sample. Stateless apart from the codec handle."""

    def __init__(self, encoding: str, sample_rate: int) -> None:
        if encoding not in G711_CODECS:
            raise ValueError(f"not a G.711 encoding: {encoding!r}")
        self._sample_rate = sample_rate
        self._codec = av.CodecContext.create(G711_CODECS[encoding], "w")
        self._codec.sample_rate = sample_rate
        self._codec.layout = "mono"
        self._codec.format = "s16"
        self._codec.open()

    def __call__(self, pcm: np.ndarray) -> bytes:
        if len(pcm) == 0:
            return b""
        frame = av.AudioFrame.from_ndarray(float_to_s16(pcm)[None, :], format="s16", layout="mono")
        frame.sample_rate = self._sample_rate
        return b"".join(bytes(packet) for packet in self._codec.encode(frame))
