"""Benchmark VoXtream2's own streaming generator (voxtream 0.2.5), one stream at a time.

The reference's ``SpeechGenerator.generate_stream`` on a checkpoint directory, as it
runs on a GPU (bfloat16 autocast, its temporal and depth transformers in CUDA graphs),
fed by its own ``text_generator(text, delay_ms=...)``: words at ``--words-per-s``,
the first at once. It generates one stream at a time (its caches hold one sequence),
so c requests queue one after another. Measured per request: first audio (from the
start, when the first word is there, to the first frame it yields), RTF (the whole
generation over the audio's length); per level: time to first audio of each queued
request counted from the level's start, and x real time.

    python3 -m bench.reference_voxtream --model DIR --concurrency 1 4 --out FILE.json

Runs where voxtream and its dependencies import (``.venv-ref-voxtream``, or the GPU
host with the stand-ins of ``tools/ref/voxtream/stubs_gpu`` on the path). The voice is
the checkpoint's ``voices/default.prompt.npy`` (the reference's prompt cache).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "ref" / "voxtream"))

from bench.texts import text_for  # noqa: E402

GENERATOR = REPO / "tools" / "ref" / "voxtream" / "generator_v1.json"
"""voxtream 0.2.5's configs/generator_v1.json (herimor/voxtream2), as the package ships it."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1])
    parser.add_argument("--words-per-s", type=float, default=10.0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--mimi-config", type=Path, help="JSON of moshi's mimi_config (a test checkpoint's)"
    )
    args = parser.parse_args()

    import run_reference as ref  # the reference, importable offline
    import torch
    from voxtream.utils.generator.helpers import text_generator

    settings = json.loads(GENERATOR.read_text())
    mimi = json.loads(args.mimi_config.read_text()) if args.mimi_config else None
    generator = ref.make_generator(args.model, {"generator": settings, "mimi_config": mimi})
    scratch = Path(tempfile.mkdtemp(prefix="voxtream-ref-"))
    prompt = ref.prompt_path(args.model / "voices" / "default.prompt.npy", scratch, "voice")
    delay_ms = int(1000 / args.words_per_s)
    frame_s = settings["mimi_frame_ms"] / 1000

    def one(index: int) -> tuple[float, float, float]:
        """(first audio s, whole s, audio s) of one request."""
        words = text_generator(text_for(index), delay_ms=delay_ms)
        start = time.perf_counter()
        first, frames = None, 0
        for _audio, _gen_time in generator.generate_stream(prompt, words):
            if first is None:
                first = time.perf_counter() - start
            frames += 1
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return first or 0.0, time.perf_counter() - start, frames * frame_s

    one(0)  # warm-up: the reference captures its CUDA graphs on the first frames
    levels = []
    for c in args.concurrency:
        ttfa, firsts, rtfs, audio = [], [], [], 0.0
        level_start = time.perf_counter()
        for i in range(c):
            queued = time.perf_counter() - level_start
            first, whole, seconds = one(i)
            ttfa.append(queued + first)
            firsts.append(first)
            rtfs.append(whole / seconds if seconds else float("nan"))
            audio += seconds
        total = time.perf_counter() - level_start
        level = {
            "concurrency": c,
            "ttfa_ms_p50": 1000 * float(np.percentile(ttfa, 50)),
            "ttfa_ms_p95": 1000 * float(np.percentile(ttfa, 95)),
            "first_audio_ms_p50": 1000 * float(np.percentile(firsts, 50)),
            "first_audio_ms_p95": 1000 * float(np.percentile(firsts, 95)),
            "rtf_p50": float(np.percentile(rtfs, 50)),
            "x_real_time": audio / total,
        }
        levels.append(level)
        print(json.dumps(level), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "reference": "voxtream 0.2.5 SpeechGenerator.generate_stream",
                "words_per_s": args.words_per_s,
                "device": "cuda" if torch.cuda.is_available() else "cpu",
                "levels": levels,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
