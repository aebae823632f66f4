"""Benchmark VoxCPM2's own streaming generator (voxcpm 2.0.3), one request at a time.

The reference pipeline ``VoxCPM(dir, enable_denoiser=False, optimize=...)`` on a
checkpoint directory, fully offline, zero-shot: ``generate_streaming(text)`` with the
built-in texts of ``bench/texts.py``, its defaults otherwise (10 Euler steps, CFG 2.0),
``retry_badcase=False`` (streaming forces that anyway). It runs in the checkpoint's
``dtype`` (config.json; bf16 for the release shapes). Its static KV caches hold one
sequence (batch 1), so c requests queue and are served one after another.

Measured per request: first audio (from the call to the first chunk it yields: prefill,
one patch's flow-matching solve and the VAE decode of that patch), RTF (the whole
generation over the audio's length); per level: time to first audio of each queued
request counted from the level's start (p50/p95), and x real time.

Every request runs to ``--max-len`` patches (160 ms each): random weights stop at
random, so the stop head is kept but never honoured, by passing the reference's own
``min_len`` equal to ``max_len`` (its loop stops on the stop flag only when the step
index exceeds ``min_len``; the stop head still runs every step, as in a real run). The
reference further caps a request at ``int(6 * target tokens + 10)`` patches; the report
gives the patches each request made, so a shorter run shows.

``--optimize`` is the reference's own ``optimize=True``: on CUDA, ``torch.compile``
(mode "reduce-overhead", CUDA graphs) of its LM steps, LocEnc and DiT estimator, plus the
warm-up generation its constructor runs; elsewhere the reference declines to compile
(it says so) and the run equals the eager one. ``compiled`` in the report says which.

    python3 -m bench.reference_voxcpm --model DIR --concurrency 1 4 --max-len 50 \\
        [--optimize] --out FILE.json

Runs where voxcpm imports: ``.venv-ref-voxcpm`` (tools/ref/voxcpm/make_venv.sh), or the
GPU host with the wheels of ``.whl/refcpm`` and ``tools/ref/voxcpm/stubs_gpu`` on the path.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")  # the reference draws a progress bar per request
sys.path.insert(0, str(REPO / "tools" / "ref" / "voxcpm" / "stubs"))  # torchaudio, never called

from bench.texts import text_for  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", help="cuda when available, else cpu")
    parser.add_argument(
        "--optimize", action="store_true", help="the reference's torch.compile + CUDA graphs"
    )
    parser.add_argument("--max-len", type=int, default=50, help="patches per request (160 ms)")
    parser.add_argument(
        "--warmup",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one untimed request first (CUDA init, compile, graph capture)",
    )
    parser.add_argument("--inference-timesteps", type=int, default=10)
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    args = parser.parse_args()
    if args.max_len < 1:
        parser.error("--max-len must be at least 1")

    import torch
    from voxcpm import VoxCPM

    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = json.loads((args.model / "config.json").read_text()).get("dtype")
    load_start = time.perf_counter()
    tts = VoxCPM(
        voxcpm_model_path=str(args.model),
        enable_denoiser=False,
        optimize=args.optimize,
        device=device,
    )
    load_s = time.perf_counter() - load_start
    model = tts.tts_model
    # The reference keeps the uncompiled LocEnc aside only once its compile went through.
    compiled = hasattr(model, "_feat_encoder_raw")
    sample_rate = int(model.sample_rate)
    cuda = device.startswith("cuda")

    def one(index: int) -> dict[str, Any]:
        """First audio, whole time and audio length of one request."""
        start = time.perf_counter()
        chunks = tts.generate_streaming(
            text_for(index),
            min_len=args.max_len,
            max_len=args.max_len,
            inference_timesteps=args.inference_timesteps,
            retry_badcase=False,
        )
        first, samples, patches = None, 0, 0
        for chunk in chunks:  # numpy on the CPU: the device work behind it is done
            if first is None:
                first = time.perf_counter() - start
            samples += len(chunk)
            patches += 1
        if cuda:
            torch.cuda.synchronize()
        whole = time.perf_counter() - start
        return {
            "first_audio_s": first or 0.0,
            "whole_s": whole,
            "audio_s": samples / sample_rate,
            "patches": patches,
        }

    warmup = one(0) if args.warmup else None
    levels = []
    for c in args.concurrency:
        ttfa, runs, audio = [], [], 0.0
        level_start = time.perf_counter()
        for i in range(c):
            queued = time.perf_counter() - level_start
            run = one(i)
            ttfa.append(queued + run["first_audio_s"])
            runs.append(run)
            audio += run["audio_s"]
        total = time.perf_counter() - level_start
        firsts = [r["first_audio_s"] for r in runs]
        rtfs = [r["whole_s"] / r["audio_s"] if r["audio_s"] else float("nan") for r in runs]
        level = {
            "concurrency": c,
            "ttfa_ms_p50": 1000 * float(np.percentile(ttfa, 50)),
            "ttfa_ms_p95": 1000 * float(np.percentile(ttfa, 95)),
            "first_audio_ms_p50": 1000 * float(np.percentile(firsts, 50)),
            "first_audio_ms_p95": 1000 * float(np.percentile(firsts, 95)),
            "rtf_p50": float(np.percentile(rtfs, 50)),
            "x_real_time": audio / total,
            "audio_s_per_request": [r["audio_s"] for r in runs],
            "patches_per_request": [r["patches"] for r in runs],
            "wall_s": total,
        }
        levels.append(level)
        print(json.dumps(level), flush=True)
    report = {
        "reference": "voxcpm 2.0.3 VoxCPM.generate_streaming (zero-shot)",
        "versions": {p: version(p) for p in ("voxcpm", "torch", "transformers")},
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "dtype": dtype,
        "optimize": args.optimize,
        "compiled": compiled,
        "max_len": args.max_len,
        "min_len": args.max_len,
        "inference_timesteps": args.inference_timesteps,
        "cfg_value": 2.0,
        "sample_rate": sample_rate,
        "load_s": load_s,
        "warmup": warmup,
        "threads": torch.get_num_threads() if not cuda else None,
        "levels": levels,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
