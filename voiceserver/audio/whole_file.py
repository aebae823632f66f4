"""Whole audio files, written once all their audio exists, with true lengths in their headers.

A streamed file cannot know its length when it starts, so the streamed WAV
carries 0xFFFFFFFF sizes, the streamed FLAC no total sample count and ADTS AAC
none at all (demuxers guess a duration from the first frames' bit rate, which
for speech that starts quietly is off by up to seconds). When the whole file
is produced before it is sent (``stream: false``, batch items), the samples are
kept and the file is written at the end into a seekable buffer, so each muxer
writes its real header:

- ``wav``: RIFF and data sizes of the real length;
- ``flac``: STREAMINFO with the total sample count (and MD5);
- ``mp3``: the LAME/Info header, so decoders trim the encoder delay exactly;
- ``aac``: AAC in an MP4 (M4A) container, whose duration and edit list give
  the exact length; ADTS has no field for it. Its media type is ``audio/mp4``.
- ``opus``: Ogg/Opus, whose granule positions already give the exact length;
- ``pcm``: the samples.
"""

from __future__ import annotations

import io
from fractions import Fraction

import av
import numpy as np

from voiceserver.audio.encoders.base import float_to_s16
from voiceserver.audio.encoders.ogg_opus import OggOpusEncoder
from voiceserver.audio.wav import wav_header

_CODECS = {"mp3": ("mp3", "libmp3lame"), "flac": ("flac", "flac"), "aac": ("mp4", "aac")}
WHOLE_MEDIA_TYPES = {"aac": "audio/mp4"}
"""Media types that differ from the streamed file's."""
_BITRATES = {8000: 32000, 16000: 48000, 22050: 64000, 24000: 64000, 44100: 96000, 48000: 96000}


class WholeFileEncoder:
    """An Encoder that keeps every sample and returns the whole file from ``flush``."""

    def __init__(self, response_format: str, sample_rate: int, content_type: str) -> None:
        self.response_format = response_format
        self.sample_rate = sample_rate
        self.content_type = WHOLE_MEDIA_TYPES.get(response_format, content_type)
        self.cheap = response_format in ("wav", "pcm")
        self._parts: list[np.ndarray] = []
        self._samples = 0
        self._emitted = 0

    @property
    def samples_emitted(self) -> int:
        return self._emitted

    def encode(self, pcm: np.ndarray) -> list[bytes]:
        if len(pcm):
            self._parts.append(float_to_s16(pcm))
            self._samples += len(pcm)
        return []

    def flush(self) -> list[bytes]:
        s16 = np.concatenate(self._parts) if self._parts else np.zeros(0, "<i2")
        self._parts = []
        self._emitted = len(s16)
        return [encode_whole_file(s16, self.sample_rate, self.response_format)]

    def close(self) -> None:
        self._parts = []


def encode_whole_file(s16: np.ndarray, rate: int, fmt: str) -> bytes:
    """One whole mono recording (int16 samples) as a ``fmt`` file."""
    pcm = np.asarray(s16, "<i2").tobytes()
    if fmt == "pcm":
        return pcm
    if fmt == "wav":
        return wav_header(rate, data_bytes=len(pcm)) + pcm
    if fmt == "opus":
        encoder = OggOpusEncoder(rate)
        samples = np.asarray(s16, np.float32) / 32767.0
        return b"".join([*encoder.encode(samples), *encoder.flush()])
    muxer, codec = _CODECS[fmt]
    out = io.BytesIO()
    with av.open(out, "w", format=muxer) as container:
        stream = container.add_stream(codec, rate=rate, layout="mono")
        if fmt == "flac":
            stream.codec_context.format = "s16"
            frame_format, data = "s16", np.asarray(s16, "<i2")
        else:
            stream.codec_context.format = "fltp"
            stream.bit_rate = _BITRATES.get(rate, 64000)
            frame_format, data = "fltp", np.asarray(s16, np.float32) / 32768.0
        if len(data):
            frame = av.AudioFrame.from_ndarray(data[None, :], format=frame_format, layout="mono")
            frame.sample_rate = rate
            frame.pts = 0  # the encoder's priming then gets negative times: an edit list
            frame.time_base = Fraction(1, rate)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()
