"""Encoders for ElevenLabs' ``output_format`` names, built from the server's own.

PCM, mu-law and A-law are :class:`~voiceserver.audio.encoders.pcm.PcmEncoder`, Opus is
the Ogg/Opus encoder at the asked bit rate, WAV the streamed (or, whole, the
true-length) WAV of the HTTP endpoints, and mp3 FFmpeg's libmp3lame through the shared
muxed-encoder mechanics, here at the bit rate the name asks for (constant, so a
payload's length in bytes says how long it plays).

:class:`LazyStage` builds its output stage on first use: its first ``feed`` runs in
the encode pool (it is never "cheap"), so opening a codec never blocks the event loop.
"""

from __future__ import annotations

import av
import numpy as np

from protocol.compat_elevenlabs import FormatSpec
from voiceserver.audio.containers import WavStreamEncoder
from voiceserver.audio.encoders.base import Encoder
from voiceserver.audio.encoders.muxed import MuxedEncoder
from voiceserver.audio.encoders.ogg_opus import OggOpusEncoder
from voiceserver.audio.encoders.pcm import PcmEncoder
from voiceserver.audio.pipeline import OutputStage
from voiceserver.audio.whole_file import WholeFileEncoder

MEDIA_TYPES = {
    "pcm": "audio/pcm",
    "ulaw": "audio/basic",
    "alaw": "audio/x-alaw-basic",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "wav": "audio/wav",
}


class Mp3Encoder(MuxedEncoder):
    """Mono mp3 at a constant ``kbps`` (libmp3lame), written as it is encoded."""

    def __init__(self, sample_rate: int, kbps: int) -> None:
        self.sample_rate = sample_rate
        self.content_type = MEDIA_TYPES["mp3"]
        super().__init__()
        # No ID3 tag, and (non-seekable output) no Xing header: only audio frames.
        options = {"flush_packets": "1", "id3v2_version": "0"}
        container = av.open(self._sink, "w", format="mp3", options=options)
        stream = container.add_stream("libmp3lame", rate=sample_rate, layout="mono")
        stream.codec_context.format = "fltp"
        stream.bit_rate = kbps * 1000
        stream.codec_context.open()
        self._start(container, stream, "fltp", stream.codec_context.frame_size or 1152)


def make_encoder(spec: FormatSpec, *, whole: bool = False) -> Encoder:
    """A fresh encoder for one response or context in ``spec``'s format (``whole``: a
    WAV file with its true length, written at the end)."""
    if spec.codec == "mp3":
        assert spec.kbps is not None
        return Mp3Encoder(spec.sample_rate, spec.kbps)
    if spec.codec == "opus":
        assert spec.kbps is not None
        return OggOpusEncoder(spec.sample_rate, bitrate=spec.kbps * 1000)
    if spec.codec == "wav":
        if whole:
            return WholeFileEncoder("wav", spec.sample_rate, MEDIA_TYPES["wav"])
        return WavStreamEncoder(spec.sample_rate)
    encoding = {"pcm": "pcm_s16le", "ulaw": "pcm_mulaw", "alaw": "pcm_alaw"}[spec.codec]
    return PcmEncoder(encoding, spec.sample_rate)


class LazyStage:
    """An :class:`OutputStage` for ``spec`` from model-rate PCM, built at its first feed
    (in the encode pool)."""

    cheap = False

    def __init__(self, spec: FormatSpec, input_rate: int) -> None:
        self._spec = spec
        self._input_rate = input_rate
        self._stage: OutputStage | None = None
        self._closed = False

    @property
    def finished(self) -> bool:
        return self._closed or (self._stage is not None and self._stage.finished)

    @property
    def audio_ms(self) -> int:
        return 0 if self._stage is None else self._stage.audio_ms

    def feed(self, pcm: np.ndarray, *, drain: bool = False, final: bool = False) -> list[bytes]:
        if self._closed:
            return []
        if self._stage is None:
            self._stage = OutputStage(make_encoder(self._spec), self._input_rate)
        return self._stage.feed(pcm, drain=drain, final=final)

    def close(self) -> None:
        self._closed = True
        if self._stage is not None:
            self._stage.close()
