"""Decode untrusted audio bytes (voice uploads, inline base64) to mono float32.

Why this is not a plain ``av.open(io.BytesIO(data))``: FFmpeg then probes the bytes
against every demuxer it has, and some demuxers read other files or URLs that the
data names: ``concat`` (an ``ffconcat`` playlist), ``hls`` (``#EXTM3U``), ``dash``,
image sequences, mov's "dref" aliases. An ``ffconcat`` playlist sent as "audio" made
the server read a file relative to its working directory, and the error text told
an existing file from a missing one.

The defences are FFmpeg's own, all applied by ``avformat_open_input`` itself:

- ``format_whitelist``: FFmpeg probes the data, then refuses a demuxer whose name is
  not on the list *before* calling its ``read_header``, which is where playlists open
  what they name, so a playlist is refused before any file is touched. FFmpeg matches
  each comma-separated alias of a demuxer's name against each entry (``matroska``
  admits ``matroska,webm``; ``mov`` admits ``mov,mp4,m4a,3gp,3g2,mj2``).
- ``protocol_whitelist`` set to the empty list: every nested open a demuxer makes
  goes through FFmpeg's protocol layer with this list (copied into the nested
  contexts a playlist demuxer creates too), and an empty list refuses every
  protocol, ``file`` included. Our own input is an in-memory I/O context, not a
  protocol, so it is unaffected. This is the second, independent layer: it holds
  even if an allowed demuxer follows a reference.
- ``enable_drefs=0``: mov's external data references stay off (FFmpeg's default,
  pinned here so that nothing upstream can turn it on).

Measured with PyAV 18.1 / FFmpeg 8.1 (the tests keep checking it, with the target
file's access time as the witness): ``concat`` and a forced ``hls`` read the named
file with no options, and neither does with either whitelist; a crafted M4A whose
track is an alias reads its target only with ``enable_drefs=1`` and no protocol list.

Two alternatives were rejected. A refusing PyAV ``io_open`` callback: ``concat``
opens each entry in a nested context that does not get the callback, and read the
file anyway. An explicit ``format=`` from sniffing magic bytes ourselves: the
whitelist already bounds what FFmpeg's probe may pick, so sniffing would only add a
parser of ours (ID3-prefixed files, MP3 frame sync versus ADTS, MP4 files that start
with ``ftyp``, ``free`` or ``moov``) that could misjudge a good file and could not
make the refusal any stronger.

Only decoders for codecs these containers carry in practice run (PCM, FLAC, MP3/MP2,
Opus, Vorbis, AAC): less decoder code exposed, and each of them has a small bounded
frame (ALAC, for one, may declare frames of millions of samples).

Limits: the byte size before opening; channels and rate from the stream header
before any decoding, then from each frame; the decoded duration frame by frame,
stopping at the first frame past ``max_seconds``, so a small file of hours of silence
costs at most ``max_seconds`` of decoding and memory.

Every undecodable input gets one error text, so that the text says nothing about
why (above all, nothing about files a playlist names). FFmpeg's messages go to the
debug log only; PyAV installs no FFmpeg log callback unless ``av.logging.set_level``
is called, so FFmpeg itself writes nothing to the server's log.
"""

from __future__ import annotations

import io
import logging

import av
import numpy as np

from models.base import ModelInputError

log = logging.getLogger(__name__)

DEMUXERS = ("wav", "flac", "mp3", "ogg", "matroska", "mov", "aac")
"""FFmpeg demuxer names allowed (``aac`` is ADTS; ``matroska`` covers WebM)."""
CODECS = frozenset({"flac", "mp3", "mp2", "opus", "vorbis", "aac"})
"""Allowed codecs, besides every ``pcm_*`` one."""
MAX_CHANNELS = 8
MIN_RATE = 8000
MAX_RATE = 192000
FORMATS_HINT = "WAV, FLAC, MP3, Ogg (Opus/Vorbis), WebM or M4A/AAC"

_OPEN_OPTIONS = {
    "format_whitelist": ",".join(DEMUXERS),
    "protocol_whitelist": "",
    "enable_drefs": "0",
}


class _Undecodable(Exception):
    """Why an input was refused; logged at debug level, never shown to the client."""


def decode_audio(
    data: bytes, *, max_seconds: float, max_bytes: int, param: str = "ref_audio"
) -> tuple[np.ndarray, int]:
    """Decode ``data`` to mono float32 samples (channels averaged) and their rate.

    Raises ``ModelInputError`` (naming ``param``): one fixed text for anything that
    is not decodable audio in an allowed format, its own text for each limit.
    """
    if len(data) > max_bytes:
        raise _error(param, f"too large ({len(data)} bytes; at most {max_bytes} bytes)")
    try:
        return _decode(data, max_seconds, param)
    except ModelInputError:
        raise
    except Exception as exc:  # hostile input: any failure at all means "not decodable"
        log.debug("%s: refused %d bytes: %r", param, len(data), exc)
        raise _error(param, f"not decodable audio; send {FORMATS_HINT}") from None


def _error(param: str, message: str) -> ModelInputError:
    return ModelInputError(f"{param}: {message}", param=param, code="invalid_field")


def _check_shape(channels: int, rate: int, param: str) -> None:
    if channels <= 0 or rate <= 0:
        raise _Undecodable(f"no channel count or rate ({channels}, {rate})")
    if channels > MAX_CHANNELS:
        raise _error(param, f"too many channels ({channels}; at most {MAX_CHANNELS})")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise _error(param, f"unsupported sample rate {rate} Hz (from {MIN_RATE} to {MAX_RATE} Hz)")


def _decode(data: bytes, max_seconds: float, param: str) -> tuple[np.ndarray, int]:
    chunks: list[np.ndarray] = []
    with av.open(
        io.BytesIO(data), container_options=_OPEN_OPTIONS, metadata_errors="replace"
    ) as container:
        if not container.streams.audio:
            raise _Undecodable("no audio stream")
        stream = container.streams.audio[0]
        codec = stream.codec_context.codec.canonical_name
        if codec not in CODECS and not codec.startswith("pcm_"):
            raise _Undecodable(f"codec {codec} not allowed")
        # The header's word is checked before decoding anything; frames are then held
        # to the first frame's shape (HE-AAC may only reveal its true rate there).
        _check_shape(stream.codec_context.channels, stream.codec_context.sample_rate, param)
        rate = channels = limit = decoded = 0
        converter: av.AudioResampler | None = None
        for frame in container.decode(stream):
            if converter is None:
                rate, channels = frame.sample_rate, frame.layout.nb_channels
                _check_shape(channels, rate, param)
                limit = int(max_seconds * rate)
                # Planar float at the native rate and layout; channels are averaged
                # below, as the reference does, rather than by ffmpeg's downmix matrix.
                converter = av.AudioResampler(format="fltp", layout=frame.layout, rate=rate)
            elif frame.sample_rate != rate or frame.layout.nb_channels != channels:
                raise _Undecodable("rate or channel count changed mid-stream")
            decoded += frame.samples
            if decoded > limit:
                raise _error(
                    param, f"too long (more than {max_seconds:g} s; at most {max_seconds:g} s)"
                )
            chunks.extend(out.to_ndarray().mean(axis=0) for out in converter.resample(frame))
        if converter is not None:
            chunks.extend(out.to_ndarray().mean(axis=0) for out in converter.resample(None))
    if not chunks:
        raise _Undecodable("no samples")
    return np.concatenate(chunks).astype(np.float32, copy=False), rate
