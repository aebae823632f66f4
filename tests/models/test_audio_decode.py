"""models.audio_decode: untrusted audio bytes decode from memory only, in allowed
formats, within limits, and fail with one text that tells nothing about why.

Every input is made here with PyAV's own encoders and muxers; nothing is mocked. That
no file was opened is witnessed by the file's access time: it is set well before the
modification time, so on this relatime mount any read moves it (checked first, so
the witness cannot pass vacuously)."""

from __future__ import annotations

import base64
import io
import os
import struct
import subprocess
import sys
import tracemalloc
import wave
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from models.audio_decode import MAX_CHANNELS, decode_audio
from models.base import ModelInputError
from tests.models import audio_fuzz
from tests.models.audio_fuzz import (
    Case,
    aligned_correlation,
    channel_mean,
    channel_signals,
    mov_with_chan,
    pyav_file,
)

RATE = 48000
GENERIC = "ref_audio: not decodable audio; send WAV, FLAC, MP3, Ogg (Opus/Vorbis), WebM or M4A/AAC"
LIMITS: dict[str, Any] = {"max_seconds": 30.0, "max_bytes": 16 << 20}
DAY_NS = 86_400 * 10**9


def source(seconds: float = 1.5, rate: int = RATE) -> np.ndarray:
    """A chirp over two tones: speech-band, and not periodic, so alignment is unique."""
    t = np.arange(int(seconds * rate)) / rate
    chirp = np.sin(2 * np.pi * (150 * t + 700 * t**2 / seconds))
    tones = np.sin(2 * np.pi * 220 * t) + 0.5 * np.sin(2 * np.pi * 1330 * t)
    fade = np.minimum(1.0, np.minimum(t, t[-1] - t) / 0.02)
    return (0.25 * (chirp + tones) * fade).astype(np.float32)


def encode(
    samples: np.ndarray,
    fmt: str,
    codec: str,
    *,
    rate: int = RATE,
    layout: str = "mono",
    options: dict[str, str] | None = None,
) -> bytes:
    """``samples`` (channels x n, or n for every channel alike) muxed as ``fmt``."""
    out = io.BytesIO()
    with av.open(out, "w", format=fmt) as container:
        stream = container.add_stream(codec, rate=rate, layout=layout, options=options or {})
        planes = np.broadcast_to(samples, (stream.codec_context.channels, samples.shape[-1]))
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(planes, np.float32), format="fltp", layout=layout
        )
        frame.sample_rate, frame.pts = rate, 0
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return out.getvalue()


def pcm_wav(samples: np.ndarray, rate: int, channels: int = 1) -> bytes:
    """16-bit WAV via the standard library, so any header value can be written."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        interleaved = np.repeat(samples, channels) if channels > 1 else samples
        w.writeframes((np.clip(interleaved, -1, 1) * 32767).astype("<i2").tobytes())
    return out.getvalue()


def refusal(data: bytes, **limits: Any) -> str:
    with pytest.raises(ModelInputError) as info:
        decode_audio(data, **{**LIMITS, **limits})
    assert (info.value.param, info.value.code) == ("ref_audio", "invalid_field")
    return str(info.value)


# -- the allowed formats decode ---------------------------------------------------------

# (container, codec, layout, encoder options, length tolerance in samples, min correlation)
FORMATS: dict[str, tuple[str, str, str, dict[str, str], int, float]] = {
    "wav": ("wav", "pcm_s16le", "mono", {}, 0, 0.9999),
    "flac": ("flac", "flac", "mono", {}, 0, 0.9999),
    "mp3": ("mp3", "libmp3lame", "mono", {}, 1152, 0.97),
    "ogg-opus": ("ogg", "libopus", "mono", {}, 960, 0.97),
    # FFmpeg's own Vorbis encoder (no libvorbis here) is experimental and stereo only.
    "ogg-vorbis": ("ogg", "vorbis", "stereo", {"strict": "experimental"}, 2048, 0.97),
    "ogg-flac": ("ogg", "flac", "mono", {}, 0, 0.9999),
    "webm-opus": ("webm", "libopus", "mono", {}, 960, 0.97),
    "m4a-aac": ("ipod", "aac", "mono", {}, 1024, 0.97),
    # ADTS has no edit list: the encoder's 1024 priming samples stay in.
    "adts-aac": ("adts", "aac", "mono", {}, 2048, 0.97),
}


@pytest.mark.parametrize("name", list(FORMATS))
def test_each_allowed_format_decodes_to_the_source(name: str) -> None:
    fmt, codec, layout, options, tolerance, min_corr = FORMATS[name]
    ref = source()
    samples, rate = decode_audio(encode(ref, fmt, codec, layout=layout, options=options), **LIMITS)
    assert rate == RATE and samples.dtype == np.float32 and samples.ndim == 1
    assert abs(len(samples) - len(ref)) <= tolerance, (len(samples), len(ref))
    assert aligned_correlation(ref, samples, max(tolerance, 1152)) > min_corr


def test_channels_are_averaged_and_the_native_rate_is_kept() -> None:
    ref = source(1.0, 22050)
    stereo = np.stack([ref, 0.5 * ref])
    samples, rate = decode_audio(
        encode(stereo, "flac", "flac", rate=22050, layout="stereo"), **LIMITS
    )
    assert rate == 22050 and len(samples) == len(ref)
    np.testing.assert_allclose(samples, 0.75 * ref, atol=1e-4)


# -- what is refused, and how -----------------------------------------------------------


def test_other_containers_truncated_and_silent_inputs_get_the_one_generic_text(
    tmp_path: Path,
) -> None:
    ref = source(0.5)
    wav = encode(ref, "wav", "pcm_s16le")
    flac = encode(ref, "flac", "flac")
    video = io.BytesIO()
    with av.open(video, "w", format="matroska") as container:
        stream = container.add_stream("ffv1", rate=25)
        stream.width = stream.height = 16
        picture = av.VideoFrame.from_ndarray(np.zeros((16, 16, 3), np.uint8), format="rgb24")
        for packet in [*stream.encode(picture.reformat(format=stream.pix_fmt)), *stream.encode()]:
            container.mux(packet)
    inputs = {
        "noise": b"this is not audio at all" * 40,
        "empty": b"",
        "truncated wav header": wav[:30],
        "truncated flac header": flac[:40],
        "aiff (not allowed)": encode(ref, "aiff", "pcm_s16be"),
        "au (not allowed)": encode(ref, "au", "pcm_s16be"),
        "caf (not allowed)": encode(ref, "caf", "pcm_s16le"),
        "no audio stream": video.getvalue(),
        "no samples": pcm_wav(np.zeros(0, np.float32), RATE),
    }
    texts = {name: refusal(data) for name, data in inputs.items()}
    assert set(texts.values()) == {GENERIC}, texts


def arm(path: Path) -> int:
    """Set the access time a day before the modification time; return it."""
    st = path.stat()
    os.utime(path, ns=(st.st_mtime_ns - DAY_NS, st.st_mtime_ns))
    return path.stat().st_atime_ns


def was_read(path: Path, armed_at: int) -> bool:
    return path.stat().st_atime_ns != armed_at


@pytest.fixture
def secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Real audio files in the working directory (and a subfolder) a playlist may name."""
    (tmp_path / "sub").mkdir()
    found = {
        "secret.wav": tmp_path / "secret.wav",
        "sub/secret.wav": tmp_path / "sub" / "secret.wav",
        "secret.aac": tmp_path / "secret.aac",
    }
    for path in found.values():
        ref = source(1.2)
        path.write_bytes(
            encode(ref, "adts", "aac") if path.suffix == ".aac" else pcm_wav(ref, RATE)
        )
    monkeypatch.chdir(tmp_path)
    return found


def concat(name: str) -> bytes:
    return f"ffconcat version 1.0\nfile '{name}'\n".encode()


def hls(name: str) -> bytes:
    return f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:1.0,\n{name}\n#EXT-X-ENDLIST\n".encode()


def frames_read_unguarded(data: bytes, **kwargs: Any) -> int:
    """What a bare ``av.open`` of ``data`` decodes, as the server did before the fix."""
    try:
        with av.open(io.BytesIO(data), **kwargs) as container:
            return sum(frame.samples for frame in container.decode(audio=0))
    except (av.FFmpegError, OSError):
        return -1


def test_the_access_time_witness_sees_reads_by_python_and_by_ffmpeg(
    secrets: dict[str, Path],
) -> None:
    for path in secrets.values():
        armed = arm(path)
        path.read_bytes()
        assert was_read(path, armed)
    # Unguarded, FFmpeg follows both playlists here: the threat is real on this build.
    path = secrets["sub/secret.wav"]
    armed = arm(path)
    assert frames_read_unguarded(concat("sub/secret.wav")) > 0
    assert was_read(path, armed)
    path = secrets["secret.aac"]
    armed = arm(path)
    frames_read_unguarded(hls("secret.aac"), format="hls")
    assert was_read(path, armed)


@pytest.mark.parametrize("playlist", [concat, hls])
def test_playlists_are_refused_before_any_file_is_opened(
    secrets: dict[str, Path], playlist: Any
) -> None:
    armed = {path: arm(path) for path in secrets.values()}
    names = [*secrets, "missing.wav", "sub/missing.wav", str(secrets["secret.wav"])]
    texts = {name: refusal(playlist(name)) for name in names}
    # One text for existing and missing files alike: no oracle.
    assert set(texts.values()) == {GENERIC}, texts
    assert [str(p) for p, at in armed.items() if was_read(p, at)] == []


def m4a_with_external_track(target: str) -> bytes:
    """An M4A whose one track lives in ``target``: its data reference ("dref") is a
    QuickTime alias record naming that path instead of the file itself."""
    plain = encode(source(0.5), "ipod", "aac")
    record = bytearray(10)  # alias header, skipped by FFmpeg
    record += bytes(28) + bytes(12)  # volume name (length, 27 chars), skipped fields
    record += bytes(64) + bytes(16)  # file name (length, 63 chars), skipped fields
    record += struct.pack(">hh", 1, 1)  # levels up from the alias and down to the target
    record += bytes(16)
    path = target.encode()
    record += struct.pack(">HH", 2, len(path)) + path + bytes(len(path) % 2)  # absolute path
    record += struct.pack(">hH", -1, 0)  # end of the record
    entry = box(b"alis", bytes(4) + bytes(record))  # flags 0: not in this file
    dref = box(b"dref", bytes(4) + struct.pack(">I", 1) + entry)
    return replace_box(plain, b"dref", dref)


def box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(payload), kind) + payload


def replace_box(data: bytes, kind: bytes, new: bytes) -> bytes:
    """``data`` (a run of ISO boxes) with the box ``kind`` replaced, sizes fixed up."""
    out, i = b"", 0
    while i < len(data):
        size, name = struct.unpack(">I4s", data[i : i + 8])
        payload = data[i + 8 : i + size]
        if name == kind:
            out += new
        elif name in (b"moov", b"trak", b"mdia", b"minf", b"dinf"):
            out += box(name, replace_box(payload, kind, new))
        else:
            out += box(name, payload)
        i += size
    return out


def test_mp4_external_data_references_are_not_followed(secrets: dict[str, Path]) -> None:
    path = secrets["secret.wav"]
    data = m4a_with_external_track("/anywhere/secret.wav")
    # With drefs on (and no protocol list), FFmpeg reads the aliased file: the file is
    # well formed for the purpose.
    armed = arm(path)
    frames_read_unguarded(data, container_options={"enable_drefs": "1"})
    assert was_read(path, armed)
    armed = arm(path)
    assert refusal(data) == GENERIC  # the track has no data of its own
    assert not was_read(path, armed)


def test_load_reference_audio_refuses_playlists_and_still_decodes(
    secrets: dict[str, Path],
) -> None:
    from models.reference_audio import load_reference_audio

    path = secrets["secret.wav"]
    armed = arm(path)
    for data in (concat("secret.wav"), concat("missing.wav")):
        for value in (data, base64.b64encode(data).decode()):
            with pytest.raises(ModelInputError) as info:
                load_reference_audio(value, None, 24000, 1.0, 60.0)
            assert str(info.value) == GENERIC and info.value.param == "ref_audio"
    assert not was_read(path, armed)
    flac = base64.b64encode(encode(source(1.5), "flac", "flac")).decode()
    wav = load_reference_audio(f"data:audio/flac;base64,{flac}", None, 24000, 1.0, 60.0)
    assert wav.dtype == np.float32 and len(wav) == 36000
    with pytest.raises(ModelInputError, match=r"too long \(more than 1 s; at most 1 s\)"):
        load_reference_audio(flac, None, 24000, 0.5, 1.0)


# -- limits -----------------------------------------------------------------------------


def test_the_byte_limit_names_itself() -> None:
    data = encode(source(0.5), "flac", "flac")
    assert decode_audio(data, max_seconds=5, max_bytes=len(data))[0].size == RATE // 2
    text = refusal(data, max_bytes=len(data) - 1)
    assert text == f"ref_audio: too large ({len(data)} bytes; at most {len(data) - 1} bytes)"


def test_the_duration_limit_names_itself() -> None:
    data = encode(source(2.0), "wav", "pcm_s16le")
    assert decode_audio(data, max_seconds=2.0, max_bytes=1 << 20)[0].size == 2 * RATE
    assert refusal(data, max_seconds=1.5) == "ref_audio: too long (more than 1.5 s; at most 1.5 s)"


def silent_ogg_opus(seconds: float) -> bytes:
    """Ogg/Opus silence made by repeating one encoded 60 ms packet: an hour is ~0.6 MB
    and takes well under a second to build (libopus would take a minute)."""
    out = io.BytesIO()
    with av.open(out, "w", format="ogg") as container:
        stream = container.add_stream(
            "libopus", rate=RATE, layout="mono", options={"frame_duration": "60"}
        )
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 2880), np.float32), "fltp", "mono")
        frame.sample_rate, frame.pts = RATE, 0
        first, *_ = [*stream.encode(frame), *stream.encode(None)]
        payload, pts = bytes(first), first.pts
        container.mux(first)
        for _ in range(int(seconds * RATE / 2880)):
            pts += 2880
            packet = av.Packet(payload)
            packet.stream, packet.time_base = stream, first.time_base
            packet.pts = packet.dts = pts
            packet.duration = 2880
            container.mux(packet)
    return out.getvalue()


def silent_flac(seconds: float, rate: int = 8000) -> bytes:
    out = io.BytesIO()
    with av.open(out, "w", format="flac") as container:
        stream = container.add_stream("flac", rate=rate, layout="mono")
        block = np.zeros((1, 65536), np.float32)
        for i in range(int(seconds * rate) // block.shape[1]):
            frame = av.AudioFrame.from_ndarray(block, format="fltp", layout="mono")
            frame.sample_rate, frame.pts = rate, i * block.shape[1]
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()


def peak_traced_bytes(data: bytes, max_seconds: float) -> tuple[int, str | None]:
    """Peak Python-heap bytes (numpy arrays included) while decoding, and the refusal."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        decode_audio(data, max_seconds=max_seconds, max_bytes=16 << 20)
        text = None
    except ModelInputError as err:
        text = str(err)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak, text


def test_hours_of_compressed_silence_are_refused_without_decoding_them() -> None:
    # The witness first: decoding 30 s of this silence keeps >= 30 s of float32 samples
    # on the traced heap (5.8 MB), so the observable does see decoded audio.
    peak, text = peak_traced_bytes(silent_ogg_opus(30), max_seconds=60)
    assert text is None and peak >= 30 * RATE * 4
    for name, data, rate in (
        ("ogg-opus", silent_ogg_opus(3600), RATE),
        ("flac", silent_flac(3600), 8000),
    ):
        assert len(data) < 1 << 20, name  # an hour in under 1 MB
        peak, text = peak_traced_bytes(data, max_seconds=5)
        assert text == "ref_audio: too long (more than 5 s; at most 5 s)", name
        # Decoding it all would hold an hour of samples (691 MB at 48 kHz); stopping
        # at the limit holds about 5 s (1 MB).
        assert peak < max(4 << 20, 3 * 5 * rate * 4), (name, peak)


@pytest.mark.parametrize(
    ("channels", "rate", "words"),
    [
        (MAX_CHANNELS + 2, RATE, f"too many channels ({MAX_CHANNELS + 2}; at most {MAX_CHANNELS})"),
        (1, 4000, "unsupported sample rate 4000 Hz (from 8000 to 192000 Hz)"),
        (1, 384000, "unsupported sample rate 384000 Hz (from 8000 to 192000 Hz)"),
    ],
)
def test_absurd_streams_are_refused(channels: int, rate: int, words: str) -> None:
    data = pcm_wav(source(0.1, rate), rate, channels)
    assert refusal(data) == f"ref_audio: {words}"


def test_ffmpeg_writes_nothing_to_the_log(secrets: dict[str, Path]) -> None:
    script = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "from models.audio_decode import decode_audio\n"
        "for data in sys.argv[1:]:\n"
        "    try:\n"
        "        decode_audio(data.encode(), max_seconds=5, max_bytes=1 << 20)\n"
        "    except ValueError:\n"
        "        pass\n"
    )
    inputs = [concat("secret.wav").decode(), hls("secret.aac").decode(), "RIFFjunkWAVEfmt "]
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", script, *inputs],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=True,
    )
    assert result.stdout == result.stderr == ""


# -- channels: the mean, for any count, layout and sample format ------------------------
# Decodes that crashed the process run in child processes (tests/models/audio_fuzz.py):
# a crash fails the test naming its case instead of killing pytest.


def planar_mean_reference(data: bytes) -> np.ndarray:
    """What decode_audio gave before the channel fix: PyAV planar float, averaged
    across planes (sound below 8 channels of native order, which is all it is used on)."""
    chunks = []
    with av.open(io.BytesIO(data)) as container:
        converter = None
        for frame in container.decode(audio=0):
            if converter is None:
                converter = av.AudioResampler(
                    format="fltp", layout=frame.layout, rate=frame.sample_rate
                )
            chunks += [out.to_ndarray().mean(axis=0) for out in converter.resample(frame)]
        assert converter is not None
        chunks += [out.to_ndarray().mean(axis=0) for out in converter.resample(None)]
    return np.concatenate(chunks)


@pytest.mark.parametrize("layout", ["mono", "stereo"])
def test_mono_and_stereo_decode_bit_for_bit_as_before(layout: str) -> None:
    """The cloning parity tests compare against references that load clips with
    librosa's mean of channels: the result for one and two channels must not move."""
    n = 1 if layout == "mono" else 2
    rng = np.random.default_rng(n)
    signals = np.clip(
        np.stack([source(0.5, 44100) * (1 - 0.3 * k) for k in range(n)])
        + 0.01 * rng.standard_normal((n, 22050)),
        -1,
        1,
    ).astype(np.float32)
    files = {
        f"wav-{codec}": pyav_file(signals, 44100, "wav", codec, layout)
        for codec in ("pcm_u8", "pcm_s16le", "pcm_s24le", "pcm_s32le", "pcm_f32le", "pcm_f64le")
    }
    files["flac"] = pyav_file(signals, 44100, "flac", "flac", layout)
    files["mp3"] = pyav_file(signals, 44100, "mp3", "libmp3lame", layout)
    files["m4a-aac"] = pyav_file(signals, 44100, "ipod", "aac", layout)
    opus = np.stack([source(0.5, RATE)] * n)
    files["ogg-opus"] = pyav_file(opus, RATE, "ogg", "libopus", layout)
    files["ogg-vorbis"] = audio_fuzz.sndfile(signals, 44100, "OGG", "VORBIS")
    for name, data in files.items():
        got, _ = decode_audio(data, **LIMITS)
        want = planar_mean_reference(data)
        assert got.dtype == want.dtype == np.float32, name
        np.testing.assert_array_equal(got, want, err_msg=name)


def decoded_in_children(cases: list[Case]) -> dict[str, audio_fuzz.Outcome]:
    report = audio_fuzz.run(cases)
    assert report.unbuildable == []
    assert report.crashes() == []
    return {outcome.case.name: outcome for outcome in report.outcomes}


@pytest.mark.parametrize("channels", range(1, MAX_CHANNELS + 1))
def test_the_down_mix_of_n_channels_is_their_mean(channels: int) -> None:
    """Files built from known, distinct per-channel signals decode to the float32
    mean of those signals, bit for bit (every integer format holds them exactly).
    Before the fix an 8-channel file of any format killed the process (SIGSEGV)."""
    signals = channel_signals(channels)
    layout = f"{channels} channels"
    builds = {
        "wav-s16": lambda: audio_fuzz.wav_s16(signals),
        "wav-flt": lambda: pyav_file(signals, audio_fuzz.RATE, "wav", "pcm_f32le", layout),
        "flac": lambda: audio_fuzz.sndfile(signals, audio_fuzz.RATE, "FLAC", "PCM_16"),
        "mkv-pcm": lambda: pyav_file(signals, audio_fuzz.RATE, "matroska", "pcm_s24be", layout),
    }
    cases = [Case(name, build, "mean", channels) for name, build in builds.items()]
    outcomes = decoded_in_children(cases)
    want = channel_mean(signals)
    for name, outcome in outcomes.items():
        assert outcome.refused is None and outcome.samples is not None, (name, outcome.refused)
        assert outcome.rate == audio_fuzz.RATE
        np.testing.assert_array_equal(outcome.samples, want, err_msg=name)
    if channels > 1:  # the witness: every channel counts (the mean is not one channel's)
        assert not any(np.array_equal(want, row) for row in signals)


def test_a_mov_that_lists_its_channels_out_of_order_decodes() -> None:
    """Before the fix a two-channel MOV whose ``chan`` box said right-then-left (a
    layout of custom order) killed the process with a double free (SIGABRT)."""
    signals = channel_signals(2)
    plain = pyav_file(signals, audio_fuzz.RATE, "mov", "pcm_s16le", "stereo")
    cases = [
        Case("right-left", lambda: mov_with_chan(plain, [2, 1]), "mean", 2),
        Case("left-left", lambda: mov_with_chan(plain, [1, 1]), "mean", 2),
    ]
    for name, outcome in decoded_in_children(cases).items():
        assert outcome.samples is not None, (name, outcome.refused)
        np.testing.assert_array_equal(outcome.samples, channel_mean(signals), err_msg=name)


def test_the_channel_fuzz_finds_nothing() -> None:
    """Every channel count up to 8 with every layout FFmpeg names, custom-order MOV
    layouts, WAVE_FORMAT_EXTENSIBLE masks, every sample format (files, and decoded
    frames packed and planar) of every allowed container, more channels than
    allowed, and a byte mutation of each file: no crash, exact means where lossless.
    (Longer runs: ``python -m tests.models.audio_fuzz --rounds 200``.)"""
    cases = list(audio_fuzz.cases())
    report = audio_fuzz.run(cases)
    assert report.unbuildable == []
    assert report.wrong() == []
    assert len(report.outcomes) == len(cases) > 500
    expected = {kind: sum(c.expect == kind for c in cases) for kind in ("mean", "like", "refused")}
    assert expected["mean"] > 400 and expected["like"] > 50 and expected["refused"] >= 6
    assert {c.frames for c in cases} >= {"u8p", "s16p", "s32p", "s64p", "fltp", "dblp", "s64"}
    rng = np.random.default_rng(20)
    mutants = [
        Case(f"{case.name}~{i}", lambda d=data: d, "any", case.channels)
        for case in cases
        if case.build is not None
        for i, data in enumerate(audio_fuzz.mutations(case.build(), rng, 1))
    ]
    assert audio_fuzz.run(mutants).crashes() == []
