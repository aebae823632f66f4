"""The real engine over a cost model of the GPU: scheduling under load, on any machine.

A stand-in runner and vocoder take the time a measured profile says a step or a
decoder call takes (``time.sleep``: no CPU is used, so a 2-core machine runs it), and
everything else is the server's own engine: its thread, scheduler, frame ring,
vocoder loop and EngineClient on an event loop. Requests arrive in a burst or on a
Poisson schedule; each asks for ``--frames`` frames (100 = 8 s at 12.5 Hz). Time to
first audio, underruns (a player starting at the first chunk, as the load generator
counts them), RTF and x real time are reported per level, as JSON.

The default costs are Qwen3-TTS 1.7B's on one H200 (``bench/results/h200-perf2``,
step profile): an AR step 11.5 ms + 0.04 ms a row, a step that admits 18 ms more +
1.2 ms a context admitted, a vocoder call 3 ms + 0.075 ms a frame.

    python -m bench.engine_sim --arrivals poisson --concurrency 128 --requests 600
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.arrivals import poisson_schedule
from bench.engine_bench import TEXT, add_model_args, load_model, slots_for
from bench.engine_overhead import SAMPLES_PER_FRAME, StandInRunner, StandInVocoder
from bench.measure import Arrival, count_underruns
from bench.stats import summarize
from models.base import DecodeItem, LoadedModel, StepPlan, StepResult, SynthParams
from voiceserver.engine.client import EngineClient
from voiceserver.engine.core import EngineConfig, EngineCore
from voiceserver.engine.messages import AudioChunk, ContextFailed, EngineEvent
from voiceserver.engine.prepare import FairPreparer

FRAME_S = SAMPLES_PER_FRAME / 24000


@dataclass(frozen=True)
class Costs:
    """Milliseconds the simulated device takes."""

    ar_base: float = 11.5
    ar_row: float = 0.04
    admit_base: float = 18.0
    admit_context: float = 1.2
    vocoder_base: float = 3.0
    vocoder_frame: float = 0.075


class CostRunner(StandInRunner):
    """One frame per stepped slot; a context finishes after ``frames`` frames."""

    def __init__(self, slots: int, frames: int, costs: Costs) -> None:
        super().__init__(slots)
        self.frames, self.costs = frames, costs
        self.made = np.zeros(slots, np.int64)

    def execute(self, plan: StepPlan) -> StepResult:
        for admit in plan.admit:
            self.made[admit.slot] = 0
        c = self.costs
        ms = c.ar_base + c.ar_row * len(plan.step)
        if plan.admit:
            ms += c.admit_base + c.admit_context * len(plan.admit)
        time.sleep(ms / 1000)
        n = len(plan.step)
        self.made[plan.step] += 1
        done = self.made[plan.step] >= self.frames
        no = np.zeros(n, bool)
        return StepResult(np.ones(n, np.int64), self._frames[:n], done, done, no, no)


class CostVocoder(StandInVocoder):
    def __init__(self, max_chunk_frames: int, costs: Costs) -> None:
        super().__init__(max_chunk_frames)
        self.costs = costs

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        frames = sum(item.chunk_frames for item in items)
        time.sleep((self.costs.vocoder_base + self.costs.vocoder_frame * frames) / 1000)
        return super().decode(items)


async def run_level(
    client: EngineClient, starts: list[float], params: SynthParams, text: str
) -> dict[str, Any]:
    """Open a context at each of ``starts`` (seconds from now); wait for all to end."""
    opened: dict[int, float] = {}
    chunks: dict[int, list[Arrival]] = {}
    ended: dict[int, float] = {}
    failed: list[int] = []
    done = asyncio.Event()

    def on_event(event: EngineEvent) -> None:  # on the loop, as the engine posts it
        if isinstance(event, ContextFailed):
            failed.append(event.cid)
        elif isinstance(event, AudioChunk):
            now = time.monotonic()
            chunks[event.cid].append(Arrival(now, len(event.pcm) / 24000))
            if event.final:
                ended[event.cid] = now
        if len(ended) + len(failed) == len(starts):
            done.set()

    t0 = time.monotonic()
    for at in starts:
        delay = t0 + at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        handle = client.open(params, on_event)
        opened[handle.cid] = time.monotonic()
        chunks[handle.cid] = []
        handle.append(text)
        handle.close_input()
    await asyncio.wait_for(done.wait(), 600)
    wall = time.monotonic() - t0
    ttfa, rtf, underruns, audio = [], [], 0, 0.0
    for cid, got in chunks.items():
        playing = [a for a in got if a.duration_s > 0]
        if not playing or cid not in ended:
            continue
        length = sum(a.duration_s for a in playing)
        audio += length
        ttfa.append(1000 * (playing[0].at - opened[cid]))
        rtf.append((ended[cid] - opened[cid]) / length)
        underruns += count_underruns(playing).count
    return {
        "requests": len(opened),
        "failed": len(failed),
        "ttfa_ms": summarize(ttfa),
        "rtf": summarize(rtf),
        "underruns": underruns,
        "x_real_time": audio / wall,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arrivals", choices=["burst", "poisson"], default="poisson")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--requests", type=int, default=400, help="per Poisson level")
    parser.add_argument("--frames", type=int, default=100, help="per request (cost model)")
    parser.add_argument(
        "--session-s", type=float, default=None, help="a request's audio (default: --frames')"
    )
    parser.add_argument("--max-chunk-frames", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    for name, value in vars(Costs()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=float, default=value)
    add_model_args(parser)
    parser.add_argument("--text", default=TEXT, help="each request's text (a real model)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    costs = Costs(**{name: getattr(args, name) for name in vars(Costs())})
    session_s = args.session_s or args.frames * FRAME_S
    levels = []
    # Poisson levels run past N active while late requests catch up. One model for
    # every level (a real one holds most of the device's memory).
    model, config, params = _model(args, costs, max(4 * max(args.concurrency), 64))
    for n in args.concurrency:
        if isinstance(model.runner, CostRunner):
            model.runner.made[:] = 0
        engine = EngineCore(model, config)
        engine.start()
        if args.arrivals == "burst":
            starts = [0.0] * n
        else:
            starts = poisson_schedule(n / session_s, args.requests, args.seed)
        try:
            level = asyncio.run(_level(engine, starts, params, args.text))
        finally:
            engine.stop()
        level |= {"concurrency": n, "arrivals": args.arrivals}
        levels.append(level)
        t, r = level["ttfa_ms"], level["rtf"]
        if t["p50"] is None or r["p50"] is None:
            print(f"{args.arrivals} {n:4d}: no request finished ({level['failed']} failed)")
            continue
        print(
            f"{args.arrivals} {n:4d}: TTFA p50 {t['p50']:7.1f} p95 {t['p95']:7.1f} ms  RTF p50"
            f" {r['p50']:.2f}  underruns {level['underruns']}  x real time"
            f" {level['x_real_time']:.1f}",
            flush=True,
        )
    report = {"costs": vars(costs), "args": vars(args) | {"out": str(args.out)}, "levels": levels}
    report["args"]["model"] = str(args.model)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
    return report


def _model(
    args: argparse.Namespace, costs: Costs, slots: int
) -> tuple[LoadedModel, EngineConfig, SynthParams]:
    """The cost model, or with ``--model``/``--config`` the real one (the config's engine settings,
    admission off, every context in one AR step)."""
    if args.model is None and args.config is None:
        model = LoadedModel(CostRunner(slots, args.frames, costs), CostVocoder(16, costs))
        config = EngineConfig(
            max_ar_batch=slots,
            max_vocoder_batch=256,
            first_chunk_frames=1,
            max_chunk_frames=args.max_chunk_frames,
            admission_load=0.0,
        )
        return model, config, SynthParams(voice="v")
    slots_for(args, slots)
    bench = load_model(args)
    config = dataclasses.replace(
        bench.config.engine,
        admission_load=0.0,
        max_contexts=0,
        max_ar_batch=max(bench.config.engine.max_ar_batch, slots),
        max_vocoder_batch=max(bench.config.engine.max_vocoder_batch, 256),
    )
    return bench.model, config, bench.params


async def _level(
    engine: EngineCore, starts: list[float], params: SynthParams, text: str
) -> dict[str, Any]:
    pool = FairPreparer(2)
    try:
        client = EngineClient(engine, asyncio.get_running_loop(), pool)
        return await run_level(client, starts, params, text)
    finally:
        pool.shutdown()


if __name__ == "__main__":
    main()
