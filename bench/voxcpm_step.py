"""Where a VoxCPM2 step's time goes: the diffusion step's share, batch by batch.

A VoxCPM2 step is two parts: the DiT's flow-matching solve (``inference_timesteps``
Euler steps, each but the first one estimator call over the conditional and the
unconditional rows) and the feedback (the stop head, the local encoder of the new
patch, one step of the base and of the residual language model). With ``B`` contexts
admitted through the runner, this times on CUDA, each captured in its own CUDA graph
and replayed (device time, no launch overhead):

- ``step``: the whole step as the runner captures it;
- ``dit``: the solve alone (from the DiT's condition and the noise);
- ``feedback``: the rest;

and, from the host, ``advance``: the runner's whole step as the engine calls it
(upload, replay, the tables). Off CUDA every part runs eagerly.

    python -m bench.voxcpm_step --model DIR --option device=cuda --option dtype=bfloat16 \\
        --batch 1 16 64 256 --out step-parts.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.engine_bench import add_model_args, load_model, percentile, slots_for
from bench.step_profile import TEXT
from models.base import Admit, Feed, StepPlan, SynthParams
from models.random_draws import gaussian
from models.voxcpm.locdit import solve

NONE = np.zeros(0, np.int64)


def timed(fn: Callable[[], Any], iters: int) -> list[float]:
    """Milliseconds per call: a CUDA graph of ``fn`` replayed (eager off CUDA)."""
    if not torch.cuda.is_available():
        out = []
        for _ in range(iters):
            start = time.perf_counter()
            fn()
            out.append(1000 * (time.perf_counter() - start))
        return out
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    out = []
    for _ in range(iters):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        graph.replay()
        end.record()
        end.synchronize()
        out.append(begin.elapsed_time(end))
    return out


@torch.no_grad()
def measure(loaded: Any, batch: int, iters: int) -> dict[str, Any]:
    runner = loaded.runner
    ar = runner.ar
    model, tables = ar.model, ar.tables
    slots = list(range(batch))
    params = SynthParams(voice="default", extra={"seed": 1, "max_new_tokens": 4 * iters})
    admits = tuple(Admit(s, runner.prepare(params)) for s in slots)
    feeds = tuple(Feed(s, tuple(runner.encode_text(TEXT)), close=True) for s in slots)
    runner.execute(StepPlan(NONE, admits, feeds, np.asarray(slots, np.int64)))
    rows = np.asarray(slots, np.int64)
    host = []
    for _ in range(iters):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        ar.advance(rows).cpu()
        host.append(1000 * (time.perf_counter() - start))
    ids = torch.as_tensor(rows, device=ar.device)
    positions = torch.as_tensor(ar.position[rows], device=ar.device)
    ar._reserve(slots, ar.position[rows] + 1)
    step_rows = torch.stack((ids, positions), dim=1)
    longest = int(ar.position[rows].max()) + 1

    def dit() -> torch.Tensor:
        lm, residual = tables["lm"][ids], tables["residual"][ids]
        mu = torch.cat((model.lm_to_dit_proj(lm), model.res_to_dit_proj(residual)), dim=-1)
        noise = gaussian(tables["key"][ids], tables["draws"][ids], ar._pair_hash)
        noise = noise.view(batch, ar.feat_dim, ar.patch).to(ar.dtype)
        prefix = tables["prefix"][ids].transpose(1, 2)
        return solve(model.feat_decoder.estimator, mu, prefix, noise, ar.steps, tables["cfg"][ids])

    def feedback() -> torch.Tensor:
        lm, patch = tables["lm"][ids], tables["prefix"][ids]
        stop = model.stop_logits(lm)
        embed = model.enc_to_lm_proj(model.feat_encoder(patch[:, None]))[:, 0]
        hidden = model.fsq_layer(model.base_lm.step(embed, ar.caches[0], ids, positions, longest))
        fused = model.fusion_concat_proj(torch.cat((hidden, embed), dim=-1))
        return model.residual_lm.step(fused, ar.caches[1], ids, positions, longest) + stop.sum()

    out = {
        "batch": batch,
        "advance_ms": _summary(host),
        "step_ms": _summary(timed(lambda: ar._step(step_rows, longest), iters)),
        "dit_ms": _summary(timed(dit, iters)),
        "feedback_ms": _summary(timed(feedback, iters)),
    }
    out["dit_share"] = out["dit_ms"]["p50"] / out["step_ms"]["p50"]
    runner.execute(StepPlan(np.asarray(slots, np.int64), (), (), NONE))
    return out


def _summary(values: list[float]) -> dict[str, float]:
    return {"p50": percentile(values, 50), "p95": percentile(values, 95), "n": len(values)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument("--batch", type=int, nargs="+", default=[1])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    slots_for(args, max(args.batch))
    loaded = load_model(args).model
    report: dict[str, Any] = {"model": str(args.model), "levels": []}
    for batch in args.batch:
        level = measure(loaded, batch, args.iters)
        report["levels"].append(level)
        print(
            f"B={batch}: step {level['step_ms']['p50']:.2f} ms (host {level['advance_ms']['p50']:.2f}),"
            f" dit {level['dit_ms']['p50']:.2f}, feedback {level['feedback_ms']['p50']:.2f},"
            f" dit share {level['dit_share']:.0%}",
            flush=True,
        )
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
