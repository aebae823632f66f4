"""Engine overhead: host time per engine step with a zero-cost stand-in model.

The stand-in returns ready-made arrays (one frame per context per step, zero
audio), so what is timed is the engine itself: scheduling, bookkeeping, the
vocoder loop's batching, and delivering events to an event loop (one
``call_soon_threadsafe`` hop into a running asyncio loop, as sessions do).

    python -m bench.engine_overhead --contexts 10 100 1000 4000 --steps 200

Writes JSON (``--out``, default bench/results/engine-overhead-TIME.json) and a plot.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.loadgen import RESULTS_DIR
from bench.stats import summarize
from models.base import (
    ARModel,
    Capabilities,
    ContextState,
    DecodeItem,
    LoadedModel,
    StepOutput,
    SynthParams,
    TextFrontend,
    Vocoder,
    VoiceInfo,
)
from voiceserver.engine.core import EngineConfig, EngineCore
from voiceserver.engine.messages import AppendText, EngineEvent, OpenContext

FRAME_DIM = 16
SAMPLES_PER_FRAME = 1920
SAMPLE_RATE = 24000


class _Frontend(TextFrontend):
    def encode(self, text: str, params: SynthParams) -> list[list[int]]:
        return [[1]]


class _Context(ContextState):
    def feed(self, units: list[list[int]]) -> None:
        pass

    def close_input(self) -> None:
        pass

    @property
    def has_work(self) -> bool:
        return True


class StandInAR(ARModel):
    """Every context always has work and yields one ready-made frame per step."""

    def __init__(self, slots: int) -> None:
        self._slots = slots
        self.frontend = _Frontend()
        self.capabilities = Capabilities(
            family="stand-in",
            sample_rate=SAMPLE_RATE,
            samples_per_frame=SAMPLES_PER_FRAME,
            voices=(VoiceInfo("v"),),
            streaming_text=True,
        )
        self._frame = np.zeros((1, FRAME_DIM), np.float32)

    @property
    def max_contexts(self) -> int:
        return self._slots

    def validate(self, params: SynthParams) -> None:
        pass

    def open(self, params: SynthParams) -> ContextState:
        return _Context()

    def close(self, state: ContextState) -> None:
        pass

    def step(self, states: list[ContextState]) -> list[StepOutput]:
        return [StepOutput(self._frame) for _ in states]


class StandInVocoder(Vocoder):
    sample_rate = SAMPLE_RATE
    samples_per_frame = SAMPLES_PER_FRAME

    def new_stream(self) -> None:
        return None

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        return [np.zeros((i.end - i.start) * SAMPLES_PER_FRAME, np.float32) for i in items]


@dataclass
class _Loop:
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    delivered: int = 0


def _start_loop() -> _Loop:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    return _Loop(loop, thread)


def _sink(target: _Loop) -> Callable[[EngineEvent], None]:
    def on_loop(event: EngineEvent) -> None:
        target.delivered += 1

    def sink(event: EngineEvent) -> None:
        target.loop.call_soon_threadsafe(on_loop, event)

    return sink


def measure(contexts: int, steps: int) -> dict[str, Any]:
    """Drive the engine step by step (no engine thread) and time each step."""
    model = LoadedModel(StandInAR(contexts), StandInVocoder())
    config = EngineConfig(
        max_ar_batch=contexts,
        max_vocoder_batch=contexts,
        first_chunk_frames=1,
        max_chunk_frames=1,
        max_lead_s=1e9,
    )
    engine = EngineCore(model, config)
    loop = _start_loop()
    sink = _sink(loop)
    params = SynthParams(voice="v")
    for _ in range(contexts):
        cid = engine.new_cid()
        engine.submit(OpenContext(cid, params, sink, max_lead_s=1e9))
        engine.submit(AppendText(cid, "x"))
    times: list[float] = []
    for _ in range(steps):
        t0 = time.perf_counter()
        engine._drain(block=False)  # noqa: SLF001 - the engine's own loop body, unthreaded
        engine._iteration()  # noqa: SLF001
        times.append(time.perf_counter() - t0)
    loop.loop.call_soon_threadsafe(loop.loop.stop)
    loop.thread.join(5)
    measured = times[steps // 10 :]  # the first steps admit everyone
    summary = summarize(measured)
    p50, p99 = summary["p50"] or 0.0, summary["p99"] or 0.0
    return {
        "contexts": contexts,
        "steps": len(measured),
        "step_ms_p50": 1000 * p50,
        "step_ms_p99": 1000 * p99,
        "per_context_us_p50": 1e6 * p50 / contexts,
        "events_delivered": loop.delivered,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[10, 100, 1000, 4000])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--label", default="current")
    args = parser.parse_args(argv)
    levels = []
    for n in args.contexts:
        level = measure(n, args.steps)
        levels.append(level)
        print(
            f"{n:5d} contexts: step p50 {level['step_ms_p50']:8.3f} ms  p99 "
            f"{level['step_ms_p99']:8.3f} ms  per context {level['per_context_us_p50']:6.2f} us",
            flush=True,
        )
    report = {
        "label": args.label,
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "levels": levels,
    }
    out = args.out or RESULTS_DIR / f"engine-overhead-{datetime.now(UTC):%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"report: {out}")
    return report


if __name__ == "__main__":
    main()
