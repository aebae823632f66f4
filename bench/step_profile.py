"""Where a model step's time goes: the runner and the vocoder alone, batch by batch.

Drives a model's runner by hand, as the engine would (admit ``B`` contexts with
the whole text, then decode steps of all of them), and times each step with
the device drained before and after; then times the vocoder on the frames
those steps made, in chunks of 1 and 4 frames for all ``B`` streams at once.
On CUDA it also counts the calls that make the host wait for the device per
step and per vocoder call (``torch.cuda.set_sync_debug_mode``), and with
``--profile`` writes the top operators of a few steps and a Chrome trace:

    python -m bench.step_profile --model DIR --option device=cuda \\
        --option dtype=bfloat16 --batch 1 16 64 --profile --out bench/results/step.json

No engine, no sockets: compare with ``bench.engine_bench`` to see what the
engine adds around the model.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.engine_bench import add_model_args, load_model, percentile, slots_for
from models.base import Admit, DecodeItem, Feed, LoadedModel, StepPlan, SynthParams

TEXT = (
    "The quick brown fox jumps over the lazy dog, and then it runs back into the forest "
    "to find its friends before the sun goes down, singing all the way home."
)
NONE = np.zeros(0, np.int64)


def _torch() -> Any:
    try:
        import torch
    except ImportError:  # a family without torch (e.g. onnxruntime only)
        return None
    return torch


def _cuda() -> Any:
    torch = _torch()
    return torch if torch is not None and torch.cuda.is_available() else None


def drain() -> None:
    """Wait for the device's queue, so a timing covers the work, not just its launch."""
    torch = _cuda()
    if torch is not None:
        torch.cuda.synchronize()


def count_waits(fn: Callable[[], Any]) -> tuple[Any, int | None]:
    """``fn()`` and how many calls in it made the host wait for the device (None off CUDA)."""
    torch = _cuda()
    if torch is None:
        return fn(), None
    drain()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            out = fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # Only the per-call warnings: the first use of the debug mode also warns, once per
    # process, that it is a prototype ("... does not yet detect all synchronizing ...").
    return out, sum(str(w.message).startswith(SYNC_WARNING) for w in caught)


SYNC_WARNING = "called a synchronizing CUDA operation"


def _plan(step: list[int], admit: tuple[Admit, ...] = (), feed: tuple[Feed, ...] = ()) -> StepPlan:
    return StepPlan(free=NONE, admit=admit, feed=feed, step=np.asarray(step, np.int64))


def _free(model: LoadedModel, slots: list[int]) -> None:
    model.runner.execute(StepPlan(free=np.asarray(slots, np.int64), admit=(), feed=(), step=NONE))


class Frames:
    """Each slot's frames as the steps make them."""

    def __init__(self, batch: int) -> None:
        self.rows: list[list[np.ndarray]] = [[] for _ in range(batch)]

    def add(self, slots: list[int], counts: np.ndarray, frames: np.ndarray) -> None:
        offset = 0
        for slot, count in zip(slots, counts.tolist(), strict=True):
            if count:
                self.rows[slot].append(frames[offset : offset + count])
                offset += count

    def of(self, slot: int) -> np.ndarray:
        return np.concatenate(self.rows[slot]) if self.rows[slot] else np.zeros((0, 0))


def measure_batch(
    model: LoadedModel,
    params: SynthParams,
    text: str,
    batch: int,
    steps: int,
    vocoder: bool = True,
) -> dict[str, Any]:
    """Admit ``batch`` contexts, step them until every one has made a frame, then time
    up to ``steps`` decode steps of them all (stopping when one finishes)."""
    runner = model.runner
    if batch > runner.max_slots:
        raise ValueError(f"--batch {batch}: the model holds {runner.max_slots} slots")
    units = tuple(runner.encode_text(text))
    slots = list(range(batch))
    admit = tuple(Admit(s, runner.prepare(params)) for s in slots)
    feed = tuple(Feed(s, units, close=True) for s in slots)
    conditioning = [a.prepared.conditioning for a in admit]
    frames = Frames(batch)
    drain()
    t = time.perf_counter()
    result = runner.execute(_plan(slots, admit, feed))
    drain()
    admit_ms = 1000 * (time.perf_counter() - t)
    frames.add(slots, result.counts, result.frames)
    for _ in range(64):  # prompts that take several steps (streamed text) finish here
        if all(frames.rows[s] for s in slots) or result.finished.any():
            break
        result = runner.execute(_plan(slots))
        frames.add(slots, result.counts, result.frames)
    times, made, waits = [], [], []
    for _ in range(steps):
        if result.finished.any():
            break
        drain()
        t = time.perf_counter()
        result, wait = count_waits(lambda: runner.execute(_plan(slots)))
        drain()
        times.append(1000 * (time.perf_counter() - t))
        made.append(int(result.counts.sum()))
        waits.append(wait)
        frames.add(slots, result.counts, result.frames)
    level: dict[str, Any] = {
        "batch": batch,
        "admit_step_ms": admit_ms,
        "steps": len(times),
        "step_ms": _summary(times),
        "frames_per_step": float(np.mean(made)) if made else 0.0,
        "host_waits_per_step": max(waits) if waits and waits[0] is not None else None,
        "vocoder": (
            measure_vocoder(model, [frames.of(s) for s in slots], conditioning) if vocoder else {}
        ),
    }
    _free(model, slots)
    return level


def measure_vocoder(
    model: LoadedModel, frames: list[np.ndarray], conditioning: list[Any]
) -> dict[str, Any]:
    """Time decode calls of every stream at once, in chunks of 1 and of 4 frames; each
    stream opens with its context's conditioning (a voice, for the families that have one)."""
    voc = model.vocoder
    shortest = min(len(f) for f in frames)
    out: dict[str, Any] = {}
    for chunk in (1, 4):
        calls = shortest // chunk
        if calls < 2:
            continue
        streams = [voc.new_stream(c) for c in conditioning]
        times, waits = [], []
        for call in range(calls):
            a, b = call * chunk, (call + 1) * chunk
            items = [DecodeItem(s, f[a:b]) for s, f in zip(streams, frames, strict=True)]
            drain()
            t = time.perf_counter()
            _, wait = count_waits(lambda items=items: voc.decode(items))
            drain()
            times.append(1000 * (time.perf_counter() - t))
            waits.append(wait)
        for stream in streams:
            voc.close_stream(stream)
        out[f"chunk_{chunk}"] = {
            "calls": calls,
            "call_ms": _summary(times[1:]),  # the first call of a stream is its own case
            "host_waits_per_call": max(waits) if waits[0] is not None else None,
        }
    return out


def profile_steps(
    model: LoadedModel, params: SynthParams, text: str, batch: int, out_dir: Path | None
) -> dict[str, Any]:
    """The device time of a few decode steps of ``batch`` contexts and their top
    operators by host and by device time (kernels replayed from a CUDA graph count
    as device time)."""
    torch = _torch()
    if torch is None:
        return {}
    from torch.profiler import ProfilerActivity, profile

    runner = model.runner
    units = tuple(runner.encode_text(text))
    slots = list(range(batch))
    admit = tuple(Admit(s, runner.prepare(params)) for s in slots)
    runner.execute(_plan(slots, admit, tuple(Feed(s, units, close=True) for s in slots)))
    for _ in range(4):
        runner.execute(_plan(slots))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if _cuda() else [])
    drain()
    with profile(activities=activities) as prof:
        for _ in range(3):
            runner.execute(_plan(slots))
        drain()
    _free(model, slots)
    if out_dir is not None:
        prof.export_chrome_trace(str(out_dir / f"step-trace-b{batch}.json"))
    device_key = "self_device_time_total"
    events = prof.key_averages()

    def row(event: Any) -> dict[str, Any]:
        return {
            "op": event.key,
            "calls_per_step": event.count / 3,
            "host_us_per_step": event.self_cpu_time_total / 3,
            "device_us_per_step": getattr(event, device_key, 0.0) / 3,
        }

    by_host = sorted(events, key=lambda e: -e.self_cpu_time_total)[:30]
    by_device = sorted(events, key=lambda e: -getattr(e, device_key, 0.0))[:30]
    return {
        "device_us_per_step": sum(getattr(e, device_key, 0.0) for e in events) / 3,
        "by_host": [row(e) for e in by_host],
        "by_device": [row(e) for e in by_device],
    }


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "max": max(values),
        "mean": float(np.mean(values)),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_args(parser)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--steps", type=int, default=24, help="timed decode steps per batch")
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--profile", action="store_true", help="top operators at each batch")
    parser.add_argument("--no-vocoder", action="store_true", help="time the runner's steps only")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    slots_for(args, max(args.batch))
    bench = load_model(args)
    model, params = bench.model, bench.params
    out_dir = args.out.parent if args.out is not None else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    measure_batch(model, params, args.text, 1, 4)  # warm-up: first calls allocate
    levels = []
    for batch in args.batch:
        level = measure_batch(
            model, params, args.text, batch, args.steps, vocoder=not args.no_vocoder
        )
        if args.profile:
            level["profile"] = profile_steps(model, params, args.text, batch, out_dir)
        levels.append(level)
        step = level["step_ms"].get("p50", float("nan"))
        voc = {k: v["call_ms"].get("p50", float("nan")) for k, v in level["vocoder"].items()}
        print(
            f"B={batch:4d} step p50 {step:8.2f} ms ({level['frames_per_step']:.1f} frames)"
            f"  host waits/step {level['host_waits_per_step']}"
            f"  vocoder call p50 {', '.join(f'{k} {v:.2f} ms' for k, v in voc.items())}"
            + (
                f"  device {level['profile']['device_us_per_step'] / 1000:.2f} ms/step"
                if args.profile
                else ""
            ),
            flush=True,
        )
    report = {
        "config": bench.config.name,
        "family": bench.config.family,
        "options": bench.options,
        "extra": bench.extra,
        "levels": levels,
    }
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
