"""In-process engine benchmark: the model behind the real EngineCore, no sockets.

Measures what the engine alone adds to time to first audio and real-time
factor, per concurrency level, for any model config or checkpoint directory
(e.g. a real-size random Qwen3-TTS checkpoint on a GPU):

    python -m bench.engine_bench --model DIR --option device=cuda \
        --option dtype=bfloat16 --concurrency 1 4 16 --out bench/results/engine.json

TTFA here is from submitting a context's text to the engine posting its first
audio chunk; RTF is (last chunk - submit) / audio seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import yaml

from models.base import LoadedModel, SynthParams
from models.registry import resolve
from voiceserver.config import (
    ModelConfig,
    config_for_checkpoint,
    load_model_config,
    with_checkpoint,
)
from voiceserver.engine.client import EngineClient
from voiceserver.engine.core import EngineCore
from voiceserver.engine.messages import AudioChunk, ContextFailed, EngineEvent
from voiceserver.engine.prepare import FairPreparer

TEXT = (
    "The quick brown fox jumps over the lazy dog, and then it runs back into the forest "
    "to find its friends before the sun goes down."
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


async def run_level(
    client: EngineClient, params: SynthParams, concurrency: int, text: str
) -> dict[str, Any]:
    events: asyncio.Queue[EngineEvent] = asyncio.Queue()
    rate = client.engine.model.capabilities.sample_rate
    start: dict[int, float] = {}
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    samples: dict[int, int] = {}
    failed = 0
    t0 = time.perf_counter()
    for _ in range(concurrency):
        handle = client.open(params, events.put_nowait, max_lead_s=1e9)
        start[handle.cid] = time.perf_counter()
        samples[handle.cid] = 0
        handle.append(text)
        handle.close_input()
    pending = set(start)
    while pending:
        event = await asyncio.wait_for(events.get(), 600)
        now = time.perf_counter()
        if isinstance(event, ContextFailed):
            failed += 1
            pending.discard(event.cid)
        elif isinstance(event, AudioChunk):
            if len(event.pcm) and event.cid not in first:
                first[event.cid] = now
            samples[event.cid] += len(event.pcm)
            if event.final:
                last[event.cid] = now
                pending.discard(event.cid)
    wall = time.perf_counter() - t0
    ttfa = [1000 * (first[c] - start[c]) for c in first]
    rtf = [(last[c] - start[c]) / (samples[c] / rate) for c in last if samples[c]]
    audio_s = sum(samples.values()) / rate
    return {
        "concurrency": concurrency,
        "failed": failed,
        "ttfa_ms": {q: percentile(ttfa, q) for q in (50, 95, 99)} if ttfa else {},
        "ttfa_ms_mean": statistics.mean(ttfa) if ttfa else None,
        "rtf_p50": percentile(rtf, 50) if rtf else None,
        "audio_s_per_request": audio_s / concurrency,
        "x_real_time": audio_s / wall,
        "wall_s": wall,
    }


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """The options that pick and configure the model, shared by the engine benchmarks."""
    parser.add_argument(
        "--config", default=None, help="model config name or YAML (default: from --model)"
    )
    parser.add_argument("--model", type=Path, default=None, help="checkpoint directory")
    parser.add_argument("--option", action="append", default=[], help="model option KEY=VALUE")
    parser.add_argument("--voice", default=None)
    parser.add_argument(
        "--extra", action="append", default=[], help="per-request setting KEY=VALUE"
    )


def slots_for(args: argparse.Namespace, largest: int) -> None:
    """Make the model hold ``largest`` contexts at once unless ``--option max_contexts``
    chose otherwise (the configs' CPU-sized slot counts would queue a level)."""
    if not any(o.partition("=")[0] == "max_contexts" for o in args.option):
        args.option.append(f"max_contexts={largest}")


@dataclasses.dataclass(frozen=True)
class BenchModel:
    config: ModelConfig
    model: LoadedModel
    options: dict[str, Any]
    extra: dict[str, Any]
    params: SynthParams
    """The request every context of the benchmark makes (checked by the runner)."""
    load_s: float


def load_model(args: argparse.Namespace) -> BenchModel:
    """The model :func:`add_model_args` describes, loaded, and the request to make."""
    options = {k: yaml.safe_load(v) for k, _, v in (o.partition("=") for o in args.option)}
    extra = {k: yaml.safe_load(v) for k, _, v in (o.partition("=") for o in args.extra)}
    if args.config is None and args.model is not None:
        config = config_for_checkpoint(args.model, options)
    else:
        config = load_model_config(args.config or "piper-joe", options)
    config = with_checkpoint(config, args.model)
    t = time.perf_counter()
    model = resolve(config.family)(config.model, config.checkpoint)
    load_s = time.perf_counter() - t
    caps = model.capabilities
    params = SynthParams(
        voice=args.voice or caps.default_voice, language=caps.languages[0], extra=extra
    )
    model.runner.validate(params)
    return BenchModel(config, model, options, extra, params, load_s)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_args(parser)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    # Every context of a level runs at once, whatever the config's capacity or the
    # measured load: this measures the device, not admission or queueing.
    top = max(args.concurrency)
    slots_for(args, top)
    bench = load_model(args)
    config, model, options, extra = bench.config, bench.model, bench.options, bench.extra
    if model.runner.max_slots < top:
        raise SystemExit(
            f"the model made {model.runner.max_slots} slots, the benchmark needs {top}: "
            "lower --concurrency or raise --option max_contexts / kv_memory_fraction"
        )
    engine_config = dataclasses.replace(
        config.engine,
        admission_load=0.0,
        max_contexts=0,
        max_ar_batch=max(config.engine.max_ar_batch, top),
        max_vocoder_batch=max(config.engine.max_vocoder_batch, top),
    )
    engine = EngineCore(model, engine_config)
    engine.start()
    params = bench.params
    try:
        levels = asyncio.run(_levels(engine, params, args))
    finally:
        engine.stop()
    report = {
        "config": config.name,
        "family": config.family,
        "options": options,
        "engine": dataclasses.asdict(engine_config),
        "extra": extra,
        "load_s": bench.load_s,
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "levels": levels,
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
    return report


async def _levels(engine: EngineCore, params: SynthParams, args: argparse.Namespace) -> list[Any]:
    pool = FairPreparer(2)
    try:
        client = EngineClient(engine, asyncio.get_running_loop(), pool)
        for _ in range(args.warmup):
            await run_level(client, params, 1, args.text)
        levels = []
        for concurrency in args.concurrency:
            level = await run_level(client, params, concurrency, args.text)
            levels.append(level)
            ttfa = level["ttfa_ms"].get(50, float("nan"))
            print(
                f"c={concurrency:4d} ttfa p50 {ttfa:8.1f} ms  rtf p50 {level['rtf_p50'] or float('nan'):6.3f}"
                f"  x-real-time {level['x_real_time']:7.2f}  audio/req {level['audio_s_per_request']:.2f} s"
                f"  failed {level['failed']}",
                flush=True,
            )
        return levels
    finally:
        pool.shutdown()


if __name__ == "__main__":
    main()
