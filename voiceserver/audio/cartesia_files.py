"""The files of Cartesia's ``POST /tts/bytes``: ``wav`` in any of its four encodings and
``mp3`` at a chosen bit rate, streamed as they are made.

Both are PyAV muxers writing into a non-seekable sink (``MuxedEncoder``), so the body
plays while it grows: FFmpeg's WAV muxer then leaves the RIFF and data sizes at
0xFFFFFFFF (length unknown, as every streamed WAV here) and writes the format tag of
the encoding (1 PCM, 3 IEEE float, 6 A-law, 7 mu-law); the MP3 muxer writes no
Xing/LAME header. ``raw`` needs no container: the socket's PCM encoders serve it.
"""

from __future__ import annotations

import av

from voiceserver.audio.encoders.muxed import MuxedEncoder

WAV_CODECS = {
    # encoding: (FFmpeg codec, sample format fed to it)
    "pcm_s16le": ("pcm_s16le", "s16"),
    "pcm_f32le": ("pcm_f32le", "flt"),
    "pcm_mulaw": ("pcm_mulaw", "s16"),
    "pcm_alaw": ("pcm_alaw", "s16"),
}
PCM_FRAME = 256
"""Samples per frame fed to the WAV muxer (PCM codecs take any size): at most this much
waits for the next chunk or the end."""


class WavFileEncoder(MuxedEncoder):
    """A streamed WAV file of ``encoding`` (s16le, f32le, mu-law or A-law)."""

    content_type = "audio/wav"

    def __init__(self, encoding: str, sample_rate: int) -> None:
        if encoding not in WAV_CODECS:
            raise ValueError(f"no WAV encoding {encoding!r}; allowed: {', '.join(WAV_CODECS)}")
        codec, sample_format = WAV_CODECS[encoding]
        self.sample_rate = sample_rate
        super().__init__()
        # bitexact: no encoder tag (a LIST chunk naming FFmpeg's version) in the header.
        container = av.open(self._sink, "w", format="wav", options={"fflags": "+bitexact"})
        stream = container.add_stream(codec, rate=sample_rate, layout="mono")
        stream.codec_context.format = sample_format
        stream.codec_context.open()
        self._start(container, stream, sample_format, PCM_FRAME)


class Mp3FileEncoder(MuxedEncoder):
    """A streamed MP3 file at ``bit_rate`` bits/s (libmp3lame)."""

    content_type = "audio/mpeg"

    def __init__(self, sample_rate: int, bit_rate: int) -> None:
        self.sample_rate = sample_rate
        super().__init__()
        options = {"flush_packets": "1", "id3v2_version": "0"}  # audio frames first, no tag
        container = av.open(self._sink, "w", format="mp3", options=options)
        stream = container.add_stream("libmp3lame", rate=sample_rate, layout="mono")
        stream.codec_context.format = "fltp"
        stream.bit_rate = bit_rate
        stream.codec_context.open()
        self._start(container, stream, "fltp", stream.codec_context.frame_size or 1152)
