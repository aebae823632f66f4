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

Channels. The result is the mean of the channels (librosa's ``to_mono``, which the
families' references load clips with), computed here in float32 from packed float
samples, not by FFmpeg's downmix matrix (which weights channels by their position).
Two bugs of PyAV 18.1 (FFmpeg 8.1) crashed the whole server here, found and measured
with the fuzzer in ``tests/models/audio_fuzz.py``:

- ``AudioFrame.planes`` counts planes by walking ``extended_data`` until a NULL
  pointer. An AVFrame keeps up to 8 (``AV_NUM_DATA_POINTERS``) plane pointers inside
  the frame, followed by ``linesize[]``; with exactly 8 planes there is no NULL
  slot, so PyAV reads ``linesize[0..1]`` as a ninth plane pointer (an 8-channel
  planar frame has 9 planes by PyAV's count) and ``to_ndarray`` reads from that
  address: SIGSEGV. Any planar frame of 8 channels did it (the previous code asked
  for planar float), i.e. any 8-channel WAV, FLAC, Ogg Vorbis, ... of any size.
  With more than 8 planes ``extended_data`` is an array on the heap and PyAV reads
  past its end (31 planes counted for 9 and for 16 channels). Packed
  (interleaved) samples are one plane for any channel count, and ``data[1]`` is
  NULL, so here every frame is converted to packed ``flt`` and only that is turned
  into an array.
- ``AudioLayout`` wrapping a layout of *custom* order (a channel map on the heap)
  copies the struct, map pointer included, and frees the map when it is collected;
  the owner (codec context or frame) frees it again: a double free, SIGABRT. A MOV
  or M4A whose ``chan`` box lists channels out of FFmpeg's order (right before
  left, or one label twice) gives such a layout, already at 2 channels (unknown
  labels give an unordered one); reading ``codec_context.channels`` alone armed it
  (valgrind: an invalid free when the context is freed), as did every decoded
  frame. Custom order comes only from the container's header here (the allowed
  decoders set native, ambisonic or unspecified layouts of their own), so the
  codec context's layout is replaced, before the decoder opens, by an unordered one
  of the same channel count, while the one wrapper of the old layout is alive; that
  wrapper then frees the old map, once. The order does not matter to a mean.

Up to ``MAX_CHANNELS`` (8) channels are decoded and averaged; more are refused
from the header (and from the first frame, for streams whose header does not
say) before anything is decoded. The fuzzer covers 1 to 8 channels with every
layout FFmpeg names, header layouts of custom order, WAV with no channel mask and
with WAVE_FORMAT_EXTENSIBLE masks, in every allowed container: packed u8, s16,
s32 (24-bit too), s64, flt and dbl as the PCM and FLAC decoders give them, planar
flt as the Vorbis, Opus, AAC and MP3 decoders give them, and decoded frames of all
twelve sample formats, packed and planar, pushed through ``DownMix`` directly; and
byte mutations of every file. With the fix, the result is the float32 mean of the
channels bit for bit for lossless input, and bit for bit what the planar code gave
for mono and stereo.
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
_PACKED = "flt"
"""The one sample format turned into arrays: packed float (see the module docstring)."""
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
        channels = _unordered_channels(stream.codec_context)
        _check_shape(channels, stream.codec_context.sample_rate, param)
        limit = decoded = 0
        mix: DownMix | None = None
        for frame in container.decode(stream):
            if mix is None:
                _check_shape(frame.layout.nb_channels, frame.sample_rate, param)
                mix = DownMix(frame.sample_rate, frame.layout.nb_channels)
                limit = int(max_seconds * mix.rate)
            decoded += frame.samples
            if decoded > limit:
                raise _error(
                    param, f"too long (more than {max_seconds:g} s; at most {max_seconds:g} s)"
                )
            chunks.extend(mix.push(frame))
        if mix is not None:
            chunks.extend(mix.push(None))
    if not chunks or mix is None:
        raise _Undecodable("no samples")
    return np.concatenate(chunks).astype(np.float32, copy=False), mix.rate


def _unordered_channels(context: av.audio.codeccontext.AudioCodecContext) -> int:
    """The header's channel count; the context's layout becomes an unordered one of
    that count. ``header`` shares the context's channel map (if the layout has one)
    and frees it when it goes: after the context stops pointing at it, so once."""
    header = context.layout
    count = header.nb_channels
    if count > 0:
        context.layout = f"{count} channels"
    return count


class DownMix:
    """Decoded frames of one rate and channel count -> mono float32 chunks, the mean
    of the channels. Frames go through FFmpeg's converter to packed float at their
    own rate and layout (no mixing there: the layout in is the layout out); only
    packed frames become arrays (see the module docstring)."""

    def __init__(self, rate: int, channels: int) -> None:
        self.rate = rate
        self.channels = channels
        self._converter = av.AudioResampler(format=_PACKED, rate=rate)

    def push(self, frame: av.AudioFrame | None) -> list[np.ndarray]:
        """Chunks for ``frame`` (None: the converter's last samples)."""
        if frame is not None and (
            frame.sample_rate != self.rate or frame.layout.nb_channels != self.channels
        ):
            raise _Undecodable("rate or channel count changed mid-stream")
        return [self._mean(out) for out in self._converter.resample(frame)]

    def _mean(self, frame: av.AudioFrame) -> np.ndarray:
        if frame.format.name != _PACKED or frame.layout.nb_channels != self.channels:
            raise _Undecodable(f"converter gave {frame.format.name}, {frame.layout.name}")
        return frame.to_ndarray().reshape(-1, self.channels).mean(axis=1)
