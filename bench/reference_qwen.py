"""Benchmark the reference package qwen-tts (``qwen_tts``) on a Qwen3-TTS checkpoint.

Runs in the reference's own environment, never imported by the server:

    PYTHONPATH=/tmp/site-ref:tools/ref/stubs python3 -m bench.reference_qwen \\
        --model DIR --concurrency 1 4 16 --frames 60 --out FILE.json
    .venv-ref/bin/python -m bench.reference_qwen --model DIR --device cpu --dtype float32 ...

Concurrency c is served the way the reference serves it: one batched call of its
public ``Qwen3TTSModel.generate_custom_voice`` with c texts, which runs the talker and
the code-to-wave decoder and returns waveforms. It is offline, so every request of the
batch gets its first audio when the call returns: TTFA is the call's wall time. Every
stream is forced to exactly ``--frames`` codec frames: the reference hard-codes
``min_new_tokens=2`` in its call to Hugging Face ``generate`` and drops other kwargs,
so the talker's ``generate`` is wrapped to raise ``min_new_tokens`` to
``max_new_tokens`` (Hugging Face's own min-length processor then masks the codec EOS),
and ``max_new_tokens`` is ``frames + 1`` (the last sampled token never gets its
residual codebooks and is not returned).
Key names follow :func:`bench.engine_bench.run_level`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

# Stand-ins for modules qwen-tts imports but the 12 Hz path never uses; real ones win.
sys.path.append(str(Path(__file__).resolve().parents[1] / "tools" / "ref" / "stubs"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog, then rests in the warm afternoon sun."
FRAME_RATE = 12.5
SAMPLES_PER_FRAME = 1920
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def first_speaker(model_dir: Path) -> str:
    config = json.loads((model_dir / "config.json").read_text())
    return next(iter(config["talker_config"]["spk_id"]))


def language_for(model_dir: Path) -> str:
    config = json.loads((model_dir / "config.json").read_text())
    languages = config["talker_config"].get("codec_language_id", {})
    return "English" if "english" in languages else "Auto"


def force_length(wrapper: Any) -> None:  # noqa: ANN401
    """Make every talker ``generate`` run to ``max_new_tokens``: EOS stays masked.

    The talker's step t returns the residual codebooks of the token sampled at step
    t - 1, so ``max_new_tokens = frames + 1`` yields ``frames`` frames (see
    :func:`run_level`); the last sampled token is dropped by the reference itself."""
    talker = wrapper.model.talker
    original: Callable[..., Any] = talker.generate

    def generate(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
        kwargs["min_new_tokens"] = kwargs["max_new_tokens"]
        return original(*args, **kwargs)

    talker.generate = generate


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("transformers", "qwen-tts", "tokenizers", "huggingface_hub", "accelerate"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


def command() -> str:
    env = [f"PYTHONPATH={os.environ['PYTHONPATH']}"] if os.environ.get("PYTHONPATH") else []
    return shlex.join([*env, sys.executable, "-m", "bench.reference_qwen", *sys.argv[1:]])


def run_level(
    wrapper: Any,  # noqa: ANN401
    concurrency: int,
    args: argparse.Namespace,
    speaker: str,
    language: str,
) -> dict[str, Any]:
    device = torch.device(args.device)
    cuda = device.type == "cuda"

    def call() -> tuple[float, list[np.ndarray], int]:
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        wavs, rate = wrapper.generate_custom_voice(
            text=[TEXT] * concurrency,
            speaker=speaker,
            language=language,
            max_new_tokens=args.frames + 1,
        )
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0, wavs, rate

    for _ in range(args.warmup):
        call()
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    ttfa: list[float] = []
    rtf: list[float] = []
    walls: list[float] = []
    audio_total = 0.0
    lengths: set[int] = set()
    rate = 0
    for _ in range(args.repeats):
        wall, wavs, rate = call()
        walls.append(wall)
        for wav in wavs:
            lengths.add(int(np.asarray(wav).shape[-1]))
            seconds = np.asarray(wav).shape[-1] / rate
            audio_total += seconds
            ttfa.append(1000 * wall)
            rtf.append(wall / seconds if seconds else float("inf"))
    requests = concurrency * args.repeats
    return {
        "concurrency": concurrency,
        "failed": 0,
        "ttfa_ms": {q: percentile(ttfa, q) for q in (50, 95, 99)},
        "ttfa_ms_mean": statistics.mean(ttfa),
        "rtf_p50": percentile(rtf, 50),
        "audio_s_per_request": audio_total / requests,
        "x_real_time": audio_total / sum(walls),
        "wall_s": sum(walls) / len(walls),
        "samples_per_stream": sorted(lengths),
        "expected_samples": args.frames * SAMPLES_PER_FRAME,
        "length_ok": lengths == {args.frames * SAMPLES_PER_FRAME},
        "sample_rate": rate,
        "gpu_max_memory_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="checkpoint directory")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--frames", type=int, default=60, help="codec frames per stream")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    parser.add_argument("--attn-implementation", default=None, help="e.g. sdpa, eager")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=None, help="JSON report (default stdout)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    from qwen_tts import Qwen3TTSModel

    load_kwargs: dict[str, Any] = {"dtype": DTYPES[args.dtype], "device_map": args.device}
    if args.attn_implementation:
        load_kwargs["attn_implementation"] = args.attn_implementation
    t0 = time.perf_counter()
    wrapper = Qwen3TTSModel.from_pretrained(str(args.model), **load_kwargs)
    load_s = time.perf_counter() - t0
    force_length(wrapper)
    speaker, language = first_speaker(args.model), language_for(args.model)

    levels = []
    for concurrency in args.concurrency:
        level = run_level(wrapper, concurrency, args, speaker, language)
        print(json.dumps(level), file=sys.stderr, flush=True)
        levels.append(level)
    device = torch.device(args.device)
    report = {
        "name": "qwen-tts reference",
        "command": command(),
        "machine": {
            "device": torch.cuda.get_device_name(device)
            if device.type == "cuda"
            else platform.processor() or platform.machine(),
            "platform": platform.platform(),
            **versions(),
        },
        "model": str(args.model),
        "dtype": args.dtype,
        "speaker": speaker,
        "language": language,
        "text": TEXT,
        "frames": args.frames,
        "frame_rate": FRAME_RATE,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "load_s": load_s,
        "levels": levels,
    }
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
