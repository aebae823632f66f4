"""What the speed stage (atempo time-stretch) costs: CPU and latency.

The stage alone (``voiceserver.audio.stretch.TempoStretch``), on 10 s of a
speech-like signal fed in chunks the way the vocoder loop delivers them, per
tempo, sample rate and chunk size:

- ``cpu_ms_per_audio_s``: CPU time per second of the model's audio (best of 3);
- ``chunk_us_p50``/``chunk_us_p99``: wall time of one ``process`` call;
- ``held_ms_max``/``held_ms_mean``: the model's audio the filter holds back after a
  chunk (what it adds to a stream's latency, in audio time: at a real-time factor
  of 0.1 the wall-clock cost is a tenth, since the next chunk pushes it out);
- ``first_out_after_ms``: the model's audio fed before the first stretched sample;
- ``drain_ms``: one drain (a flush point: silence pushed through, the filter rebuilt).

With ``--spawn CONFIG`` it also serves that config and times HTTP requests
(``response_format: pcm``, streamed) at several speeds: time to the first audio
byte and to the end, median of ``--repeats``, so the stage's share of time to first
audio is seen end to end (Piper: speeds up to 1 are native, above are stretched).

    python -m bench.stretch_latency --out bench/results/stretch.json
    python -m bench.stretch_latency --spawn piper-joe --out bench/results/stretch.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from voiceserver.audio.stretch import TempoStretch, tempo_stages

TEMPOS = (0.25, 0.5, 0.8, 1.25, 1.5, 2.0, 3.0, 4.0)
RATES = (22050, 24000)
"""Piper's and Qwen3-TTS's / Chatterbox's rates."""
CHUNK_MS = (20, 80, 320)
SECONDS = 10.0
TEXT = (
    "Hello there, how are you today? The quick brown fox jumps over the lazy dog, "
    "and then it runs back home before the rain starts."
)


def speechlike(rate: int, seconds: float, seed: int = 0) -> np.ndarray:
    """Harmonics of a gliding 120-220 Hz voice with a syllable-rate envelope, plus noise."""
    n = int(rate * seconds)
    t = np.arange(n) / rate
    f0 = 170 + 50 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = np.clip(np.sin(2 * np.pi * 3.5 * t), 0, None) ** 0.5
    noise = np.random.default_rng(seed).standard_normal(n) * 0.02
    return (0.2 * voice * envelope + noise).astype(np.float32)


def measure_stage(tempo: float, rate: int, chunk_ms: int) -> dict[str, Any]:
    x = speechlike(rate, SECONDS)
    size = rate * chunk_ms // 1000
    chunks = [x[i : i + size] for i in range(0, len(x), size)]
    cpu = []
    for _ in range(3):
        stretch = TempoStretch(tempo, rate)
        start = time.process_time()
        for chunk in chunks:
            stretch.process(chunk)
        stretch.finish()
        cpu.append(time.process_time() - start)
    stretch = TempoStretch(tempo, rate)
    walls, held, first = [], [], None
    for chunk in chunks:
        start = time.perf_counter()
        out = stretch.process(chunk)
        walls.append(time.perf_counter() - start)
        held.append((stretch.samples_in - stretch.samples_out * tempo) / rate)
        if first is None and len(out):
            first = stretch.samples_in / rate
    drains = []
    for _ in range(20):
        stretch.process(chunks[1])
        start = time.perf_counter()
        stretch.drain()
        drains.append(time.perf_counter() - start)
    walls_us = sorted(w * 1e6 for w in walls)
    return {
        "tempo": tempo,
        "stages": tempo_stages(tempo),
        "sample_rate": rate,
        "chunk_ms": chunk_ms,
        "cpu_ms_per_audio_s": round(min(cpu) * 1000 / SECONDS, 3),
        "chunk_us_p50": round(walls_us[len(walls_us) // 2], 1),
        "chunk_us_p99": round(walls_us[min(len(walls_us) - 1, int(0.99 * len(walls_us)))], 1),
        "held_ms_max": round(max(held) * 1000, 1),
        "held_ms_mean": round(statistics.fmean(held) * 1000, 1),
        "first_out_after_ms": round((first or 0.0) * 1000, 1),
        "drain_ms": round(statistics.fmean(drains) * 1000, 3),
    }


def measure_server(config: str, speeds: list[float], repeats: int) -> list[dict[str, Any]]:
    import httpx

    from bench.spawn import spawn_server

    rows = []
    with spawn_server(config) as server, httpx.Client(base_url=server.http, timeout=120) as http:
        for speed in [1.0, *speeds]:  # the first warms the server up
            firsts, totals, lengths = [], [], []
            for _ in range(repeats):
                body = {"input": TEXT, "response_format": "pcm", "speed": speed}
                start = time.perf_counter()
                first = None
                size = 0
                with http.stream("POST", "/v1/audio/speech", json=body) as response:
                    response.raise_for_status()
                    for data in response.iter_bytes():
                        if first is None and data:
                            first = time.perf_counter() - start
                        size += len(data)
                totals.append(time.perf_counter() - start)
                firsts.append(first or 0.0)
                lengths.append(size / 2 / 24000)
            rows.append(
                {
                    "speed": speed,
                    "first_audio_ms_p50": round(statistics.median(firsts) * 1000, 1),
                    "total_ms_p50": round(statistics.median(totals) * 1000, 1),
                    "audio_s": round(statistics.median(lengths), 3),
                }
            )
    return rows[1:]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/stretch.json"))
    parser.add_argument("--spawn", help="also time HTTP requests against this config")
    parser.add_argument("--speeds", type=float, nargs="*", default=[0.5, 1.0, 1.5, 2.0, 4.0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    stage = [
        measure_stage(tempo, rate, chunk_ms)
        for rate in RATES
        for chunk_ms in CHUNK_MS
        for tempo in TEMPOS
    ]
    report: dict[str, Any] = {
        "what": "atempo time-stretch stage: CPU and audio held back (bench/stretch_latency.py)",
        "machine": {"platform": platform.platform(), "processor": platform.processor()},
        "signal_s": SECONDS,
        "stage": stage,
    }
    if args.spawn:
        report["server"] = {
            "config": args.spawn,
            "text": TEXT,
            "http": measure_server(args.spawn, args.speeds, args.repeats),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for row in stage:
        print(
            f"{row['sample_rate']} Hz, {row['chunk_ms']:>3} ms chunks, tempo {row['tempo']:<4}:"
            f" {row['cpu_ms_per_audio_s']:6.2f} ms CPU/s, held {row['held_ms_mean']:5.1f} ms"
            f" (max {row['held_ms_max']:5.1f}), first out after {row['first_out_after_ms']} ms,"
            f" drain {row['drain_ms']:.2f} ms"
        )
    for row in report.get("server", {}).get("http", []):
        print(
            f"HTTP speed {row['speed']}: first audio {row['first_audio_ms_p50']} ms,"
            f" total {row['total_ms_p50']} ms, {row['audio_s']} s of audio"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
