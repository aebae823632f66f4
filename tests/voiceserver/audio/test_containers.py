"""File encoders of the HTTP endpoints: each stream, decoded by FFmpeg's own
demuxers and decoders (PyAV) or the stdlib, gives back the input audio."""

from __future__ import annotations

import io
import struct
import wave

import av
import numpy as np
import pytest
import soxr

from voiceserver.audio.containers import (
    MEDIA_TYPES,
    RESPONSE_FORMATS,
    SAMPLE_RATES,
    make_file_encoder,
)
from voiceserver.audio.encoders.base import float_to_s16
from voiceserver.audio.pipeline import make_file_output

# format: (codec name PyAV reports, lowest correlation, lowest SNR in dB) for lossy codecs
LOSSY = {"mp3": ("mp3float", 0.995, 20.0), "aac": ("aac", 0.99, 16.0), "opus": ("opus", 0.98, 12.0)}


def decode(data: bytes) -> tuple[np.ndarray, int, str]:
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        frames = [f.to_ndarray() for f in container.decode(stream)]
        rate, codec = stream.codec_context.sample_rate, stream.codec_context.name
    samples = np.concatenate([f.reshape(-1) if f.shape[0] == 1 else f[0] for f in frames])
    if samples.dtype == np.int16:
        return samples.astype(np.float32) / 32768.0, rate, codec
    return samples.astype(np.float32), rate, codec


def encode(fmt: str, chunks: list[np.ndarray], input_rate: int, rate: int = 24000) -> list[bytes]:
    stage = make_file_output(fmt, input_rate, rate)
    return [b"".join(stage.push(c)) for c in chunks] + [b"".join(stage.finish())]


@pytest.mark.parametrize("fmt", ["flac", "wav"])
def test_lossless_files_hold_the_exact_samples(fmt, speechlike, chunker):
    x = speechlike(22050, 1.3)
    pieces = encode(fmt, chunker(x, max_len=3000), 22050)
    samples, rate, _ = decode(b"".join(pieces))
    want = float_to_s16(soxr.resample(x, 22050, 24000))
    assert rate == 24000
    assert np.array_equal(np.rint(samples * 32768).astype(np.int16), want)


def test_pcm_is_raw_s16le(speechlike, chunker):
    x = speechlike(24000, 0.7)
    data = b"".join(encode("pcm", chunker(x), 24000))
    assert np.array_equal(np.frombuffer(data, "<i2"), float_to_s16(x))


@pytest.mark.parametrize("fmt", sorted(LOSSY))
def test_lossy_files_decode_to_the_input(fmt, speechlike, chunker, compare):
    codec, min_corr, min_snr = LOSSY[fmt]
    x = speechlike(24000, 1.5)
    samples, rate, got_codec = decode(b"".join(encode(fmt, chunker(x, max_len=3000), 24000)))
    assert got_codec == codec
    ref = x if rate == 24000 else soxr.resample(x, 24000, rate)
    match = compare(ref, samples, max_lag=rate // 10)
    assert match.corr >= min_corr and match.snr_db >= min_snr, match
    # Nothing lost at the end: the whole input is in the file (plus codec padding).
    assert len(samples) - match.lag >= len(ref) - rate // 1000


@pytest.mark.parametrize("fmt", RESPONSE_FORMATS)
def test_bytes_come_out_while_audio_goes_in(fmt, speechlike):
    stage = make_file_output(fmt, 24000, 24000)
    x = speechlike(24000, 2.0)
    early = b"".join(p for c in np.array_split(x, 20)[:10] for p in stage.push(c))
    assert len(early) > 1000  # a second of audio in, a playable prefix out
    rest = b"".join([p for c in np.array_split(x, 20)[10:] for p in stage.push(c)] + stage.finish())
    samples = decode(early + rest)[0] if fmt != "pcm" else np.frombuffer(early + rest, "<i2")
    assert len(samples) >= len(x) * (2 if fmt == "opus" else 1)


@pytest.mark.parametrize("fmt", ["mp3", "aac", "flac"])  # Ogg streams differ by serial
def test_output_does_not_depend_on_chunking(fmt, speechlike, chunker):
    x = speechlike(24000, 1.0)

    def run(chunks: list[np.ndarray]) -> bytes:
        encoder = make_file_encoder(fmt, 24000)
        return b"".join([p for c in chunks for p in encoder.encode(c)] + encoder.flush())

    assert run([x]) == run(chunker(x, seed=3, max_len=500))


@pytest.mark.parametrize(
    ("fmt", "rate"), [(fmt, rate) for fmt in RESPONSE_FORMATS for rate in SAMPLE_RATES[fmt]]
)
def test_every_allowed_rate(fmt, rate, speechlike):
    pieces = encode(fmt, [speechlike(16000, 0.5)], 16000, rate)
    data = b"".join(pieces)
    if fmt == "pcm":
        assert abs(len(data) // 2 - rate // 2) <= 2
        return
    samples, decoded_rate, _ = decode(data)
    assert decoded_rate == (48000 if fmt == "opus" else rate)
    assert len(samples) >= decoded_rate // 2 - decoded_rate // 1000


def test_streamed_wav_header_has_unknown_sizes(speechlike):
    data = b"".join(encode("wav", [speechlike(24000, 0.5)], 24000))
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt "
    assert struct.unpack_from("<I", data, 4)[0] == 0xFFFFFFFF
    assert struct.unpack_from("<I", data, 40)[0] == 0xFFFFFFFF
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
        assert len(w.readframes(w.getnframes())) == len(data) - 44


def test_mp3_starts_with_a_frame_not_a_tag(speechlike):
    data = b"".join(encode("mp3", [speechlike(24000, 0.3)], 24000))
    assert data[0] == 0xFF and data[1] & 0xE0 == 0xE0  # MPEG audio frame sync


def test_aac_is_adts(speechlike):
    data = b"".join(encode("aac", [speechlike(24000, 0.3)], 24000))
    assert data[0] == 0xFF and data[1] & 0xF6 == 0xF0  # ADTS sync, layer 0


def test_close_emits_nothing_and_ends_the_stream(speechlike):
    for fmt in RESPONSE_FORMATS:
        stage = make_file_output(fmt, 24000, 24000)
        stage.push(speechlike(24000, 0.2))
        stage.close()
        stage.close()
        with pytest.raises(RuntimeError):
            stage.push(speechlike(24000, 0.1))
        with pytest.raises(RuntimeError):
            stage.finish()


def test_media_types():
    assert MEDIA_TYPES == {
        "mp3": "audio/mpeg",
        "opus": "audio/ogg",
        "aac": "audio/aac",
        "flac": "audio/flac",
        "wav": "audio/wav",
        "pcm": "audio/pcm",
    }


def test_bad_format_or_rate_is_refused():
    with pytest.raises(ValueError, match="mp3, opus, aac, flac, wav, pcm"):
        make_file_encoder("ogg", 24000)
    with pytest.raises(ValueError, match="8000, 12000, 16000, 24000, 48000"):
        make_file_encoder("opus", 22050)
    with pytest.raises(ValueError, match="44100"):
        make_file_encoder("mp3", 11025)
