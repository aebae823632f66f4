"""Engine overhead: host time per engine step with a zero-cost stand-in model.

The stand-in runner returns ready-made arrays (one frame per context per step,
zero audio), so what is timed is the engine itself: scheduling, bookkeeping,
the vocoder loop's batching, and delivering events to the real EngineClient on
an event loop in another thread (one hop per step), as the server does.

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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.loadgen import RESULTS_DIR
from bench.stats import summarize
from models.base import (
    Capabilities,
    DecodeItem,
    LoadedModel,
    ModelRunner,
    Prepared,
    StepPlan,
    StepResult,
    SynthParams,
    Vocoder,
    VoiceInfo,
)
from voiceserver.engine.client import EngineClient
from voiceserver.engine.core import EngineConfig, EngineCore
from voiceserver.engine.prepare import FairPreparer

FRAME_DIM = 16
SAMPLES_PER_FRAME = 1920
SAMPLE_RATE = 24000


class StandInRunner(ModelRunner):
    """Every stepped slot yields one ready-made frame; nothing ever ends."""

    frame_dim = FRAME_DIM
    frame_dtype = np.int64
    prepares_inline = True
    encodes_inline = True

    def __init__(self, slots: int) -> None:
        self._slots = slots
        self.capabilities = Capabilities(
            family="stand-in",
            sample_rate=SAMPLE_RATE,
            samples_per_frame=SAMPLES_PER_FRAME,
            voices=(VoiceInfo("v"),),
            streaming_text=True,
        )
        self._frames = np.zeros((slots, FRAME_DIM), np.int64)
        self._ones = np.ones(slots, np.int64)
        self._no = np.zeros(slots, bool)

    @property
    def max_slots(self) -> int:
        return self._slots

    def validate(self, params: SynthParams) -> None:
        pass

    def prepare(self, params: SynthParams) -> Prepared:
        return Prepared()

    def encode_text(self, text: str) -> list[np.ndarray]:
        return [np.ones(1, np.int64)]

    def execute(self, plan: StepPlan) -> StepResult:
        n = len(plan.step)
        no = self._no[:n]
        return StepResult(self._ones[:n], self._frames[:n], no, no, no, no)


class StandInVocoder(Vocoder):
    """Silence for every chunk: views of one buffer, so the stand-in costs nothing."""

    sample_rate = SAMPLE_RATE
    samples_per_frame = SAMPLES_PER_FRAME

    def __init__(self, max_chunk_frames: int) -> None:
        self._silence = np.zeros(max_chunk_frames * SAMPLES_PER_FRAME, np.float32)

    def new_stream(self, conditioning: Any = None) -> None:
        return None

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        return [self._silence[: i.chunk_frames * SAMPLES_PER_FRAME] for i in items]


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


def measure(contexts: int, steps: int, max_chunk_frames: int = 16) -> dict[str, Any]:
    """Drive the engine step by step (no engine thread) and time each step; its
    events go to a real EngineClient on an event loop in another thread.

    Chunks start at one frame and double up to ``max_chunk_frames`` (Qwen3-TTS's
    setting); contexts arrive over the first ``max_chunk_frames`` steps, as
    requests do, so their chunks do not all fall due in the same step."""
    model = LoadedModel(StandInRunner(contexts), StandInVocoder(max_chunk_frames))
    config = EngineConfig(
        max_ar_batch=contexts,
        max_vocoder_batch=contexts,
        first_chunk_frames=1,
        max_chunk_frames=max_chunk_frames,
        max_lead_s=1e9,
        admission_load=0.0,
    )
    engine = EngineCore(model, config)
    target = _start_loop()

    def on_event(event: object) -> None:
        target.delivered += 1

    client: list[EngineClient] = []

    async def attach() -> None:
        client.append(EngineClient(engine, asyncio.get_running_loop(), FairPreparer(1)))

    async def open_some(n: int) -> None:
        for _ in range(n):
            client[0].open(SynthParams(voice="v"), on_event, max_lead_s=1e9).append("x")

    asyncio.run_coroutine_threadsafe(attach(), target.loop).result()
    waves = np.diff(np.linspace(0, contexts, max_chunk_frames + 1).round().astype(int))
    times: list[float] = []
    for step in range(steps + len(waves)):
        if step < len(waves):
            asyncio.run_coroutine_threadsafe(open_some(int(waves[step])), target.loop).result()
        t0 = time.perf_counter()
        engine.drain()
        engine.step()
        times.append(time.perf_counter() - t0)
    target.loop.call_soon_threadsafe(target.loop.stop)
    target.thread.join(5)
    measured = times[len(waves) + max_chunk_frames :]  # everyone admitted, chunks at full size
    summary = summarize(measured)
    p50, p99 = summary["p50"] or 0.0, summary["p99"] or 0.0
    return {
        "contexts": contexts,
        "steps": len(measured),
        "step_ms_p50": 1000 * p50,
        "step_ms_p99": 1000 * p99,
        "per_context_us_p50": 1e6 * p50 / contexts,
        "events_delivered": target.delivered,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[10, 100, 1000, 4000])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--label", default="current")
    parser.add_argument(
        "--compare", type=Path, default=None, help="an earlier report to plot beside this one"
    )
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
    reports = [report] if args.compare is None else [json.loads(args.compare.read_text()), report]
    write_plot(reports, out.with_suffix(".png"))
    print(f"report: {out}\nplot:   {out.with_suffix('.png')}")
    return report


def write_plot(reports: list[dict[str, Any]], path: Path) -> None:
    """Step time (p50 and p99) and per-context cost against active contexts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for report in reports:
        levels = report["levels"]
        n = [level["contexts"] for level in levels]
        label = report["label"]
        left.plot(n, [lv["step_ms_p50"] for lv in levels], "o-", label=f"{label} p50")
        left.plot(n, [lv["step_ms_p99"] for lv in levels], "^:", label=f"{label} p99")
        right.plot(n, [lv["per_context_us_p50"] for lv in levels], "o-", label=label)
    left.axhline(1.0, color="grey", lw=0.8, ls="--")
    left.set(xlabel="active contexts", ylabel="host time per step (ms)", title="engine step")
    right.set(xlabel="active contexts", ylabel="us per context (p50)", title="per context")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3, which="both")
        ax.legend()
    fig.suptitle("engine overhead, zero-cost stand-in model")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
