"""Audio files of the OpenAI-style HTTP endpoints, encoded as a stream.

`response_format` of OpenAI's `POST /v1/audio/speech` names a file format:
`mp3`, `opus`, `aac`, `flac`, `wav` or `pcm` (OpenAI's default is `mp3`;
vllm-omni defaults to `wav` and knows no `aac`). Every one of them is produced
here while the audio is generated, so a chunked HTTP body can carry it:

- `pcm`: raw signed 16-bit little-endian mono, no header.
- `wav`: a 44-byte RIFF header with 0xFFFFFFFF sizes (length unknown, the way
  OpenAI and vllm-omni stream WAV), then the same samples as `pcm`.
- `opus`: Ogg/Opus (RFC 7845), pages handed out as they complete.
- `mp3` (libmp3lame), `aac` (FFmpeg's AAC in ADTS frames) and `flac`: PyAV
  muxers writing into a non-seekable sink. Non-seekable output is what makes
  them streamable: the mp3 muxer then writes no Xing/LAME header and the FLAC
  muxer leaves STREAMINFO's sample count at 0 ("unknown"), which decoders accept.

A file produced whole before it is sent (``whole=True``) is written by
``voiceserver.audio.whole_file`` instead, with its true length in its header.

Media types are those of vllm-omni and common practice: `audio/mpeg`,
`audio/ogg`, `audio/aac`, `audio/flac`, `audio/wav`, `audio/pcm`.

The output rate is 24 kHz by default (OpenAI's `pcm` is 24 kHz); vllm-omni's
extra `sample_rate` picks another one of `SAMPLE_RATES[fmt]`.
"""

from __future__ import annotations

import av
import numpy as np

from voiceserver.audio.encoders.base import Encoder
from voiceserver.audio.encoders.muxed import MuxedEncoder
from voiceserver.audio.encoders.ogg_opus import OggOpusEncoder
from voiceserver.audio.encoders.pcm import PcmEncoder
from voiceserver.audio.format import OPUS_SAMPLE_RATES, PCM_SAMPLE_RATES
from voiceserver.audio.wav import wav_header
from voiceserver.audio.whole_file import WHOLE_MEDIA_TYPES, WholeFileEncoder
from voiceserver.audio.whole_file import encode_whole_file as encode_samples

RESPONSE_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
DEFAULT_RESPONSE_FORMAT = "mp3"
DEFAULT_SAMPLE_RATE = 24000
MEDIA_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
SAMPLE_RATES: dict[str, tuple[int, ...]] = {
    fmt: OPUS_SAMPLE_RATES if fmt == "opus" else PCM_SAMPLE_RATES for fmt in RESPONSE_FORMATS
}
# Mono speech bit rates: transparent for synthetic speech, far below the codecs' limits
# (FFmpeg's AAC caps a channel at 6 bits per sample, so 8 kHz gets less).
_MP3_BITRATE = {8000: 32000, 16000: 48000, 22050: 64000, 24000: 64000, 44100: 96000, 48000: 96000}
_AAC_BITRATE = {8000: 32000, 16000: 48000, 22050: 64000, 24000: 64000, 44100: 96000, 48000: 96000}


class WavStreamEncoder:
    """16-bit PCM behind an open-ended RIFF header (sent with the first payload)."""

    cheap = True
    """The PCM encoder's cost, plus a header once."""

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.content_type = MEDIA_TYPES["wav"]
        self._pcm = PcmEncoder("pcm_s16le", sample_rate)
        self._header: bytes | None = wav_header(sample_rate)

    @property
    def samples_emitted(self) -> int:
        return self._pcm.samples_emitted

    def encode(self, pcm: np.ndarray) -> list[bytes]:
        return self._with_header(self._pcm.encode(pcm))

    def flush(self) -> list[bytes]:
        return self._with_header(self._pcm.flush())

    def close(self) -> None:
        self._pcm.close()

    def _with_header(self, payloads: list[bytes]) -> list[bytes]:
        if self._header is None:
            return payloads
        header, self._header = self._header, None
        return [header, *payloads]


class AvFileEncoder(MuxedEncoder):
    """One FFmpeg encoder + muxer writing a file as a byte stream (mp3, ADTS AAC, FLAC).

    Frames of exactly the codec's frame size go in (the last one may be
    short), so the bytes out are the same however the input was chunked.
    """

    _SPECS = {
        # response_format: (muxer, codec, sample format fed to the codec)
        "mp3": ("mp3", "libmp3lame", "fltp"),
        "aac": ("adts", "aac", "fltp"),
        "flac": ("flac", "flac", "s16"),
    }

    def __init__(self, response_format: str, sample_rate: int) -> None:
        muxer, codec, sample_format = self._SPECS[response_format]
        self.sample_rate = sample_rate
        self.content_type = MEDIA_TYPES[response_format]
        super().__init__()
        options = {"flush_packets": "1"}
        if muxer == "mp3":
            options["id3v2_version"] = "0"  # no tag: the first bytes are audio frames
        container = av.open(self._sink, "w", format=muxer, options=options)
        stream = container.add_stream(codec, rate=sample_rate, layout="mono")
        stream.codec_context.format = sample_format
        if response_format == "mp3":
            stream.bit_rate = _MP3_BITRATE[sample_rate]
        elif response_format == "aac":
            stream.bit_rate = _AAC_BITRATE[sample_rate]
        stream.codec_context.open()
        self._start(container, stream, sample_format, stream.codec_context.frame_size or 1024)


def media_type(response_format: str, whole: bool = False) -> str:
    """The Content-Type of a response in ``response_format`` (streamed or whole)."""
    if whole:
        return WHOLE_MEDIA_TYPES.get(response_format, MEDIA_TYPES[response_format])
    return MEDIA_TYPES[response_format]


def make_file_encoder(response_format: str, sample_rate: int, whole: bool = False) -> Encoder:
    """A fresh encoder for one response (``whole``: the whole file at the end);
    raises ValueError for a bad format or a rate the format does not allow."""
    if response_format not in RESPONSE_FORMATS:
        raise ValueError(
            f"unknown response_format {response_format!r}; allowed: {', '.join(RESPONSE_FORMATS)}"
        )
    if sample_rate not in SAMPLE_RATES[response_format]:
        allowed = ", ".join(str(r) for r in SAMPLE_RATES[response_format])
        raise ValueError(
            f"sample_rate {sample_rate!r} is not allowed for {response_format}: {allowed}"
        )
    if whole:
        return WholeFileEncoder(response_format, sample_rate, MEDIA_TYPES[response_format])
    if response_format == "pcm":
        return PcmEncoder("pcm_s16le", sample_rate)
    if response_format == "wav":
        return WavStreamEncoder(sample_rate)
    if response_format == "opus":
        return OggOpusEncoder(sample_rate)
    return AvFileEncoder(response_format, sample_rate)


def encode_whole_file(s16: bytes, rate: int, fmt: str) -> bytes:
    """A whole mono s16le recording as one ``fmt`` file, lengths in its header."""
    return encode_samples(np.frombuffer(s16, "<i2"), rate, fmt)
