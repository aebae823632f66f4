"""Channel counts, channel layouts and sample formats of every allowed container, and
a runner that decodes each in a child process, so that a crash (SIGSEGV, SIGABRT)
names its case instead of killing pytest.

Files are built with PyAV's own muxers and encoders, with libsndfile (``soundfile``:
WAVE_FORMAT_EXTENSIBLE channel masks, and multichannel Ogg Vorbis, which FFmpeg's
own stereo-only Vorbis encoder cannot write), and, for layouts no encoder writes, by
editing a MOV's ``chan`` box. Besides files, decoded frames of every sample format
(packed and planar u8, s16, s32, s64, flt, dbl) go straight through
``models.audio_decode.DownMix``: planar integer formats come out of no decoder the
allowed containers reach here, yet the down-mix must hold for them too.

Signals are on an 8-bit grid (k/128), so every format holds them exactly and the
sum of up to 8 channels is exact in float32: the decoder's result must equal the
float32 mean bit for bit (lossless codecs), or correlate with it (lossy ones).

The test suite runs every case and one mutant of each (about 10 s). Long runs, with
``--rounds`` byte mutations of every file (300 rounds: 151,500 mutants, 10 minutes on
two cores), and under valgrind, which also reports invalid reads and frees that do
not crash (608 cases and 3 mutants of each: under 2 minutes)::

    .venv/bin/python -m tests.models.audio_fuzz --rounds 300 --keep /tmp/audio-crashes
    .venv/bin/python -m tests.models.audio_fuzz --rounds 3 --valgrind

``--decoder MODULE`` runs another module's ``decode_audio`` (e.g. the code before
the fix, to see what it did); ``--match TEXT`` picks cases by name.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import wave
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import av
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
RATE = 16000
SECONDS = 0.25
MAX_CHANNELS = 8
VALGRIND = ("valgrind", "-q", "--error-exitcode=99", "--undef-value-errors=no", "--leak-check=no")
VALGRIND_SUPPRESSIONS = """{
   the dynamic loader's word-wise strncmp over rpath strings (a known false positive)
   Memcheck:Addr8
   fun:strncmp
   fun:is_dst
}
"""

# -- signals ----------------------------------------------------------------------------


def channel_signals(channels: int, seconds: float = SECONDS, rate: int = RATE) -> np.ndarray:
    """``channels`` x n distinct tones on an 8-bit grid (see the module docstring)."""
    t = np.arange(int(seconds * rate)) / rate
    rows = [
        (0.5 / (1 + k % 3)) * np.sin(2 * np.pi * (110 + 70 * k) * t + k) for k in range(channels)
    ]
    return (np.round(np.array(rows) * 128) / 128).astype(np.float32)


def channel_mean(signals: np.ndarray) -> np.ndarray:
    """The float32 mean across channels (exact sums: the grid keeps them exact)."""
    total = signals.astype(np.float64).sum(axis=0).astype(np.float32)
    return total / np.float32(signals.shape[0])


# -- files ------------------------------------------------------------------------------


def wav_s16(signals: np.ndarray, rate: int = RATE) -> bytes:
    """Plain 16-bit PCM WAV (no channel mask) via the standard library."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(signals.shape[0])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.round(signals.T * 32768).astype("<i2").tobytes())
    return out.getvalue()


def pyav_file(
    signals: np.ndarray,
    rate: int,
    fmt: str,
    codec: str,
    layout: str,
    options: dict[str, str] | None = None,
    tracks: int = 1,
) -> bytes:
    """``signals`` (channels x n) encoded with PyAV as ``codec`` in container ``fmt``
    (``tracks`` identical audio streams)."""
    out = io.BytesIO()
    with av.open(out, "w", format=fmt) as container:
        streams = [
            container.add_stream(codec, rate=rate, layout=layout, options=options or {})
            for _ in range(tracks)
        ]
        # Packed: PyAV's planar ``from_ndarray`` fails at 8 channels (it sees 9 planes).
        packed = np.ascontiguousarray(signals.T, np.float32).reshape(1, -1)
        for stream in streams:
            frame = av.AudioFrame.from_ndarray(packed, format="flt", layout=layout)
            frame.sample_rate, frame.pts = rate, 0
            for packet in [*stream.encode(frame), *stream.encode(None)]:
                container.mux(packet)
    return out.getvalue()


def sndfile(signals: np.ndarray, rate: int, fmt: str, subtype: str) -> bytes:
    """``signals`` written by libsndfile: as 16-bit integers for integer subtypes (it
    shifts them, exactly), as floats for the others."""
    import soundfile

    out = io.BytesIO()
    data = signals.T if subtype in ("FLOAT", "DOUBLE", "VORBIS", "OPUS") else signals.T * 32768
    kind = np.int16 if subtype.startswith("PCM") else np.float32
    soundfile.write(out, data.astype(kind), rate, format=fmt, subtype=subtype)
    return out.getvalue()


_MOV_PARENTS = (b"moov", b"trak", b"mdia", b"minf", b"stbl", b"stsd", b"sowt", b"twos", b"lpcm")


def mov_with_chan(data: bytes, labels: list[int], tag: int = 0, bitmap: int = 0) -> bytes:
    """A MOV (as ``pyav_file(..., "mov", ...)`` writes it: ``moov`` after ``mdat``,
    so no chunk offset moves) whose every ``chan`` box is replaced: layout ``tag``
    (0: "use the channel descriptions"), ``bitmap``, one description per label
    (CoreAudio labels: 1 left, 2 right, 3 centre, ...). Labels out of FFmpeg's order,
    repeated or unknown give a layout of custom order."""
    body = bytes(4) + struct.pack(">III", tag, bitmap, len(labels))
    body += b"".join(struct.pack(">II", label, 0) + bytes(12) for label in labels)
    new = struct.pack(">I4s", 8 + len(body), b"chan") + body
    boxes, start = [], 0
    while (start := data.find(b"chan", start)) >= 4:
        boxes.append(start - 4)
        start += 4
    if not boxes:
        raise ValueError("no chan box")
    for at in reversed(boxes):  # the last first: the offsets before it stay put
        (size,) = struct.unpack(">I", data[at : at + 4])
        data = _replace_box(data, at, size, new)
    return data


def _replace_box(data: bytes, at: int, old_size: int, new: bytes) -> bytes:
    """``data`` with the box at ``at`` replaced by ``new``, every box around it resized."""
    out = bytearray(data[:at] + new + data[at + old_size :])
    delta = len(new) - old_size
    for name in _MOV_PARENTS:
        start = 0
        while (start := data.find(name, start)) >= 4:
            box = start - 4
            (size,) = struct.unpack(">I", data[box:start])
            if box < at < box + size:
                out[box:start] = struct.pack(">I", size + delta)
            start += 4
    return bytes(out)


# -- cases ------------------------------------------------------------------------------

LAYOUT_NAMES = (
    "mono stereo downmix 2.1 3.0 3.0(back) 4.0 quad quad(side) 3.1 5.0 5.0(side) 4.1 5.1 "
    "5.1(side) 6.0 6.0(front) 3.1.2 hexagonal 6.1 6.1(back) 6.1(front) 7.0 7.0(front) 7.1 "
    "7.1(wide) 7.1(wide-side) 5.1.2 octagonal cube ambisonic\u00a01 FL+LFE2 BC+TFL+TBR FC+LFE"
).replace("\u00a0", "_")


def named_layouts() -> dict[int, list[str]]:
    """FFmpeg's layout names by channel count (native order, and a few odd masks)."""
    found: dict[int, list[str]] = {}
    for name in LAYOUT_NAMES.split():
        name = name.replace("_", " ")
        try:
            count = av.AudioLayout(name).nb_channels
        except ValueError:
            continue
        found.setdefault(count, []).append(name)
    return found


PCM_CODECS = {
    "u8": "pcm_u8",
    "s16": "pcm_s16le",
    "s24": "pcm_s24le",
    "s32": "pcm_s32le",
    "s64": "pcm_s64le",
    "flt": "pcm_f32le",
    "dbl": "pcm_f64le",
    "alaw": "pcm_alaw",
}
"""WAV sample formats (what the PCM decoder gives: u8, s16, s32, s32, s64, flt, dbl)."""
LOSSLESS: list[tuple[str, str, str, Iterable[int]]] = [
    ("flac", "flac", "flac", range(1, 9)),
    ("ogg-flac", "ogg", "flac", range(1, 9)),
    ("mkv-flac", "matroska", "flac", range(1, 9)),
    ("mkv-pcm-s16", "matroska", "pcm_s16le", range(1, 9)),
    ("mkv-pcm-s24be", "matroska", "pcm_s24be", range(1, 9)),
    ("mkv-pcm-f32", "matroska", "pcm_f32le", range(1, 9)),
    ("mov-pcm-s16", "mov", "pcm_s16le", range(1, 9)),
    ("mov-pcm-u8", "mov", "pcm_u8", range(1, 9)),
    ("mov-pcm-f64be", "mov", "pcm_f64be", range(1, 9)),
]
"""(name, container, codec, channel counts): decode to the exact mean."""
LOSSY: list[tuple[str, str, str, Iterable[int], int]] = [
    ("m4a-aac", "ipod", "aac", range(1, 9), RATE),
    ("adts-aac", "adts", "aac", range(1, 9), RATE),
    ("mkv-aac", "matroska", "aac", range(1, 9), RATE),
    ("ogg-opus", "ogg", "libopus", range(1, 9), 48000),
    ("webm-opus", "webm", "libopus", range(1, 9), 48000),
    ("mp3", "mp3", "libmp3lame", range(1, 3), RATE),
    ("mkv-mp3", "matroska", "libmp3lame", range(1, 3), RATE),
]
"""(name, container, codec, channel counts, rate): decode to something like the mean."""
FRAME_FORMATS = ("u8", "u8p", "s16", "s16p", "s32", "s32p", "s64", "s64p")
FRAME_FORMATS += ("flt", "fltp", "dbl", "dblp")


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], bytes] | None
    """The file's bytes; None for a case of synthetic frames (``frames``)."""
    expect: str
    """``mean``: exactly ``channel_mean`` of the signals; ``like``: correlates with
    it; ``refused``: a field error; ``any``: anything but a crash."""
    channels: int = 0
    rate: int = RATE
    frames: str | None = None
    """Sample format of synthetic frames pushed through ``DownMix``."""


def cases() -> Iterator[Case]:
    """Every channel count (1..8), layout and sample format of every allowed container,
    then more channels than allowed."""
    layouts = named_layouts()
    for n in range(1, MAX_CHANNELS + 1):
        sig = channel_signals(n)
        first = layouts[n][0]
        yield Case(f"wav-s16-{n}ch-nomask", lambda s=sig: wav_s16(s), "mean", n)
        for sample, codec in PCM_CODECS.items():
            for layout in layouts[n]:
                expect = "like" if sample == "alaw" else "mean"
                yield Case(
                    f"wav-{sample}-{layout}",
                    lambda s=sig, c=codec, lay=layout: pyav_file(s, RATE, "wav", c, lay),
                    expect,
                    n,
                )
        for name, fmt, codec, counts in LOSSLESS:
            if n in counts:
                yield Case(
                    f"{name}-{n}ch",
                    lambda s=sig, f=fmt, c=codec, lay=first: pyav_file(s, RATE, f, c, lay),
                    "mean",
                    n,
                )
        for name, fmt, codec, counts, rate in LOSSY:
            if n in counts:
                yield Case(
                    f"{name}-{n}ch",
                    lambda f=fmt, c=codec, lays=layouts[n], r=rate, k=n: _any_layout(
                        channel_signals(k, SECONDS, r), r, f, c, lays
                    ),
                    "like",
                    n,
                    rate,
                )
        for subtype in ("PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE"):
            yield Case(
                f"wavex-{subtype.lower()}-{n}ch",
                lambda s=sig, st=subtype: sndfile(s, RATE, "WAVEX", st),
                "mean",
                n,
            )
        yield Case(f"sf-flac-{n}ch", lambda s=sig: sndfile(s, RATE, "FLAC", "PCM_16"), "mean", n)
        yield Case(f"ogg-vorbis-{n}ch", lambda s=sig: sndfile(s, RATE, "OGG", "VORBIS"), "like", n)
        for labels in _odd_labels(n):
            for tracks in (1, 2) if n > 1 else (1,):  # (two mono tracks get no chan box)
                yield Case(
                    f"mov-chan-{'.'.join(map(str, labels))}-x{tracks}",
                    lambda s=sig, lab=labels, lay=first, t=tracks: mov_with_chan(
                        pyav_file(s, RATE, "mov", "pcm_s16le", lay, tracks=t), lab
                    ),
                    "mean",
                    n,
                )
        for family in (2, 255) if n in (4, 6, 8) else ():
            if family == 2 and n == 8:
                continue  # ambisonic counts are (k + 1)^2, plus 2 at most
            yield Case(
                f"webm-opus-family{family}-{n}ch",
                lambda k=n, lays=layouts[n], f=family: opus_family(
                    _any_layout(channel_signals(k, SECONDS, 48000), 48000, "webm", "libopus", lays),
                    f,
                ),
                "like",
                n,
                48000,
            )
        for sample in FRAME_FORMATS:
            yield Case(f"frames-{sample}-{n}ch", None, "mean", n, frames=sample)
    for n in (9, 12, 16, 24, 64, 255):
        yield Case(f"wav-s16-{n}ch", lambda k=n: wav_s16(channel_signals(k, 0.02)), "refused", n)
    yield Case(
        "wavex-s16-24ch",
        lambda: sndfile(channel_signals(24, 0.02), RATE, "WAVEX", "PCM_16"),
        "refused",
        24,
    )
    yield Case(
        "mov-chan-12-labels",
        lambda: mov_with_chan(
            pyav_file(channel_signals(2), RATE, "mov", "pcm_s16le", "stereo"), list(range(1, 13))
        ),
        "mean",  # FFmpeg ignores a chan box of another channel count
        2,
    )


def opus_family(data: bytes, family: int) -> bytes:
    """A WebM Opus file with its OpusHead's channel mapping family replaced (2:
    ambisonic, with 2 extra channels a mask; 255: unordered). WebM has no page CRC."""
    at = data.find(b"OpusHead")
    if at < 0:
        raise ValueError("no OpusHead")
    return data[: at + 18] + bytes([family]) + data[at + 19 :]


def _any_layout(signals: np.ndarray, rate: int, fmt: str, codec: str, layouts: list[str]) -> bytes:
    """The file in the first of ``layouts`` the encoder takes (Opus wants Vorbis order)."""
    for layout in layouts[:-1]:
        try:
            return pyav_file(signals, rate, fmt, codec, layout)
        except av.FFmpegError:
            continue
    return pyav_file(signals, rate, fmt, codec, layouts[-1])


def _odd_labels(channels: int) -> list[list[int]]:
    """CoreAudio channel labels reversed, all the same, and unknown."""
    same = [1] * channels
    unknown = [100 + k for k in range(channels)]
    return [list(range(channels, 0, -1)), same, unknown] if channels > 1 else [same, unknown]


def mutations(data: bytes, rng: np.random.Generator, count: int) -> Iterator[bytes]:
    """Byte flips, overwritten header bytes, small integers written into the header
    (channel counts, masks, formats live there) and truncations of ``data``."""
    for _ in range(count):
        buf = bytearray(data)
        head = min(len(buf), 512)
        kind = int(rng.integers(4))
        if kind == 0:
            for _ in range(int(rng.integers(1, 8))):
                buf[int(rng.integers(len(buf)))] ^= 1 << int(rng.integers(8))
        elif kind == 1:
            for _ in range(int(rng.integers(1, 4))):
                buf[int(rng.integers(head))] = int(rng.integers(256))
        elif kind == 2:
            at = int(rng.integers(head))
            value = int(rng.choice([0, 1, 2, 7, 8, 9, 16, 63, 64, 255, 0xFFFF]))
            buf[at : at + 2] = struct.pack(rng.choice(["<H", ">H"]), value)
        else:
            buf = buf[: int(rng.integers(1, len(buf)))]
        yield bytes(buf)


# -- running them in a child ------------------------------------------------------------


@dataclass
class Outcome:
    case: Case
    crashed: str | None = None
    refused: str | None = None
    samples: np.ndarray | None = None
    rate: int = 0


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)
    unbuildable: list[str] = field(default_factory=list)

    def crashes(self) -> list[str]:
        return [f"{o.case.name}: {o.crashed}" for o in self.outcomes if o.crashed]

    def wrong(self) -> list[str]:
        return [f"{o.case.name}: {why}" for o in self.outcomes if (why := verdict(o))]


def verdict(outcome: Outcome) -> str | None:
    """What is wrong with ``outcome`` (None: nothing)."""
    case = outcome.case
    if outcome.crashed:
        return f"crashed ({outcome.crashed})"
    if case.expect == "any":
        return None
    if case.expect == "refused":
        words = f"too many channels ({case.channels}; at most {MAX_CHANNELS})"
        ok = outcome.refused is not None and outcome.refused.endswith(words)
        return None if ok else f"not refused with {words!r}: {outcome.refused}"
    if outcome.samples is None:
        return f"refused: {outcome.refused}"
    if outcome.rate != case.rate:
        return f"rate {outcome.rate}, want {case.rate}"
    want = channel_mean(channel_signals(case.channels, SECONDS, case.rate))
    got = outcome.samples
    if case.expect == "mean":
        if got.shape != want.shape or not np.array_equal(got, want):
            diff = np.max(np.abs(got - want)) if got.shape == want.shape else "-"
            return f"not the mean of the channels: {got.shape} vs {want.shape}, off by {diff}"
        return None
    # Lossy encoders low-pass an LFE channel (AAC 5.1 and 7.1: about 0.8 here).
    corr = aligned_correlation(want, got, 4096)
    return None if corr > 0.7 else f"correlation {corr:.3f} with the mean of the channels"


def aligned_correlation(ref: np.ndarray, got: np.ndarray, max_lag: int) -> float:
    """Correlation of ``got`` with ``ref`` at the best shift within ``max_lag`` samples
    (lossy codecs add a delay: encoder priming, MP3's decoder delay); 0 when ``got``
    is less than half as long."""
    if len(got) < len(ref) // 2:
        return 0.0
    size = len(ref) + len(got)
    cross = np.fft.irfft(np.fft.rfft(got, size) * np.conj(np.fft.rfft(ref, size)), size)
    lags = np.r_[0 : max_lag + 1, -max_lag:0]
    lag = int(lags[np.argmax(cross[lags])])
    a, b = (ref, got[lag:]) if lag >= 0 else (ref[-lag:], got)
    n = min(len(a), len(b))
    return float(np.corrcoef(a[:n], b[:n])[0, 1])


def run(
    cases_: Iterable[Case],
    workdir: Path | None = None,
    valgrind: bool = False,
    decoder: str = "models.audio_decode",
) -> Report:
    """Build every case, decode them all in child processes (a new child after each
    crash, until every case has an outcome) and collect the outcomes."""
    report = Report()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        folder = Path(tmp)
        specs: list[tuple[Case, Path]] = []
        for i, case in enumerate(cases_):
            spec = {"frames": case.frames, "channels": case.channels, "rate": case.rate}
            if case.build is not None:
                try:
                    data = case.build()
                except (av.FFmpegError, ValueError, RuntimeError, OSError) as err:
                    report.unbuildable.append(f"{case.name}: {err!r}")
                    continue
                (folder / f"{i:06d}.bin").write_bytes(data)
                spec["file"] = f"{i:06d}.bin"
            path = folder / f"{i:06d}.json"
            path.write_text(json.dumps(spec))
            specs.append((case, path))
        crashed: dict[str, str] = {}
        while True:
            todo = [p for _, p in specs if not _result(p).exists() and p.name not in crashed]
            if not todo:
                break
            at, how = _child(folder, todo, valgrind, decoder)
            if at is None:
                break
            crashed[at] = how
        for case, path in specs:
            outcome = Outcome(case, crashed=crashed.get(path.name))
            result = _result(path)
            if outcome.crashed is None and result.exists():
                got = json.loads(result.read_text())
                if "refused" in got:
                    outcome.refused = got["refused"]
                elif "crashed" in got:
                    outcome.crashed = got["crashed"]
                else:
                    outcome.rate = got["rate"]
                    outcome.samples = np.load(path.with_suffix(".npy"))
            elif outcome.crashed is None:
                outcome.crashed = "no result"
            report.outcomes.append(outcome)
    return report


def _result(spec: Path) -> Path:
    return spec.with_suffix(".out")


def _child(folder: Path, todo: list[Path], valgrind: bool, decoder: str) -> tuple[str | None, str]:
    """Run the child on ``todo``; on a crash, the spec it was on and how it ended."""
    command = [sys.executable, "-m", "tests.models.audio_fuzz", "--decoder", decoder, "--child"]
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + (f"{os.pathsep}{path}" if path else "")}
    if valgrind:
        # Python's own start-up reads uninitialised memory by design: only invalid
        # reads, writes and frees count (--undef-value-errors=no).
        suppressions = folder / "valgrind.supp"
        suppressions.write_text(VALGRIND_SUPPRESSIONS)
        command = [*VALGRIND, f"--suppressions={suppressions}", *command]
        env["PYTHONMALLOC"] = "malloc"
    proc = subprocess.run(
        command,
        input="\n".join(map(str, todo)),
        capture_output=True,
        text=True,
        env=env,
        check=False,
        cwd=folder,
        timeout=3600,
    )
    if proc.returncode == 0:
        return None, ""
    started = [line for line in proc.stdout.splitlines() if line.startswith("@")]
    how = (
        signal.Signals(-proc.returncode).name if proc.returncode < 0 else f"exit {proc.returncode}"
    )
    tail = "\n".join(line for line in proc.stderr.splitlines()[-12:] if "dl-" not in line)
    at = Path(started[-1][1:]).name if started else todo[0].name
    return at, f"{how}: {tail}"


def _child_main(specs: list[str], decoder: str) -> int:
    """Decode each spec with module ``decoder``, writing ``.out`` (and ``.npy``) next
    to it. Announces each spec on stdout first, so that the parent knows which one a
    crash was on."""
    import importlib

    from models.base import ModelInputError

    module = importlib.import_module(decoder)
    decode_audio, down_mix = module.decode_audio, getattr(module, "DownMix", None)

    for spec_path in map(Path, specs):
        print(f"@{spec_path}", flush=True)
        spec = json.loads(spec_path.read_text())
        result: dict[str, object]
        try:
            if spec["frames"]:
                if down_mix is None:
                    raise RuntimeError(f"{decoder} has no DownMix")
                samples = _frames_down_mix(down_mix, spec["frames"], spec["channels"], spec["rate"])
                rate = spec["rate"]
            else:
                data = (spec_path.parent / spec["file"]).read_bytes()
                samples, rate = decode_audio(data, max_seconds=30.0, max_bytes=16 << 20)
        except ModelInputError as err:
            result = {"refused": str(err)}
        except Exception as err:  # a Python exception from decode_audio is a bug too
            result = {"crashed": f"{type(err).__name__}: {err}"}
        else:
            np.save(spec_path.with_suffix(".npy"), samples)
            result = {"rate": rate}
        _result(spec_path).write_text(json.dumps(result))
    return 0


def _frames_down_mix(down_mix: type, fmt: str, channels: int, rate: int) -> np.ndarray:
    """The signals as decoded frames of sample format ``fmt`` (made by FFmpeg's own
    converter from packed float, never through PyAV's planar ``from_ndarray``), in
    pieces of 1000 samples, through ``DownMix``."""
    layout = f"{channels} channels"
    signals = channel_signals(channels, SECONDS, rate)
    to_fmt = av.AudioResampler(format=fmt, layout=layout, rate=rate)
    mix = down_mix(rate, channels)
    chunks: list[np.ndarray] = []
    for start in range(0, signals.shape[1], 1000):
        piece = np.ascontiguousarray(signals[:, start : start + 1000].T).reshape(1, -1)
        packed = av.AudioFrame.from_ndarray(piece, format="flt", layout=layout)
        packed.sample_rate, packed.pts = rate, start
        for frame in to_fmt.resample(packed):
            assert frame.format.name == fmt, frame.format.name
            chunks.extend(mix.push(frame))
    for frame in to_fmt.resample(None):
        chunks.extend(mix.push(frame))
    chunks.extend(mix.push(None))
    return np.concatenate(chunks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="mutants per case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--match", default="", help="only cases whose name contains this")
    parser.add_argument("--valgrind", action="store_true", help="children run under valgrind")
    parser.add_argument("--keep", type=Path, help="save crashing inputs in this folder")
    parser.add_argument(
        "--decoder", default="models.audio_decode", help="module with decode_audio (to compare)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # the specs to decode, one path a line, on stdin
        return _child_main(sys.stdin.read().split("\n"), args.decoder)
    chosen = [c for c in cases() if args.match in c.name]
    report = run(chosen, valgrind=args.valgrind, decoder=args.decoder)
    kinds = {k: sum(o.case.expect == k for o in report.outcomes) for k in ("mean", "like")}
    kinds["refused"] = sum(o.refused is not None for o in report.outcomes)
    print(f"checked {kinds}")
    for line in report.unbuildable:
        print(f"unbuildable {line}")
    problems = report.wrong()
    print(f"{len(report.outcomes)} cases, {len(problems)} wrong", flush=True)
    rng = np.random.default_rng(args.seed)
    sources = [c for c in chosen if c.build is not None and c.expect != "refused"]
    mutated = crashed = 0
    for start in range(0, len(sources), 20):  # 20 cases' mutants at a time: bounded memory
        mutants = [
            Case(f"{case.name}~{i}", lambda d=data: d, "any", case.channels)
            for case in sources[start : start + 20]
            for i, data in enumerate(_safe_mutations(case, rng, args.rounds))
        ]
        mutant_report = run(mutants, valgrind=args.valgrind, decoder=args.decoder)
        problems += mutant_report.wrong()
        mutated += len(mutant_report.outcomes)
        crashed += len(mutant_report.crashes())
        for outcome in mutant_report.outcomes:
            if args.keep and outcome.crashed and outcome.case.build is not None:
                args.keep.mkdir(parents=True, exist_ok=True)
                (args.keep / f"{outcome.case.name}.bin").write_bytes(outcome.case.build())
    print(f"{mutated} mutants, {crashed} crashed")
    for line in problems:
        print(line)
    return 1 if problems else 0


def _safe_mutations(case: Case, rng: np.random.Generator, rounds: int) -> list[bytes]:
    assert case.build is not None
    try:
        return list(mutations(case.build(), rng, rounds))
    except (av.FFmpegError, ValueError, RuntimeError, OSError):
        return []


if __name__ == "__main__":
    sys.exit(main())
