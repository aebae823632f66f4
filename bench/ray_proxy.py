"""What Ray Serve's proxy costs one stream: time to first audio through Serve against a
direct connection to ``voiceserver serve``, the same model on the same machine.

Starts a direct server (``voiceserver serve``, its own process) and a local Ray cluster
with one replica behind Serve's proxy (what ``voiceserver ray --replicas 1`` deploys),
then runs one stream at a time against each, alternating blocks so drift on a shared
machine falls on both; requests are the load generator's (word pieces streamed in, a
new connection each, TTFA = flush of the first clause -> first audio chunk)::

    .venv/bin/python -m bench.ray_proxy --requests 20 --out bench/results/cpu-ray-proxy/piper-joe.json
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.loadgen import run_level
from bench.report import machine_info, write_json
from bench.request import RequestSpec
from bench.spawn import LOAD_GENERATOR_LIMITS, free_port, spawn_server
from bench.stats import summarize

RESULTS = Path(__file__).resolve().parent / "results" / "cpu-ray-proxy"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="piper-joe", help="model config (default: %(default)s)")
    parser.add_argument("--requests", type=int, default=20, help="per target (default: 20)")
    parser.add_argument("--blocks", type=int, default=4, help="alternating blocks per target")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured requests per target")
    parser.add_argument("--out", type=Path, default=RESULTS / "piper-joe.json")
    return parser


def _deploy_on_ray(config: str, port: int) -> str:
    """A local Ray cluster, Serve's proxy on ``port``, one replica: its WebSocket URL."""
    import ray

    from voiceserver.ray_serve.main import deploy
    from voiceserver.ray_serve.options import parse

    ray.init(include_dashboard=False, log_to_driver=False)
    argv = ["--config", config, "--port", str(port), "--replicas", "1", "--log-level", "warning"]
    deploy(parse([*argv, *LOAD_GENERATOR_LIMITS]))
    return f"ws://127.0.0.1:{port}/v1/audio/speech/ws"


async def _connect_ms(url: str, count: int) -> list[float]:
    """Opening a session: the upgrade until ``session.created``, ``count`` times."""
    import websockets

    out = []
    for _ in range(count):
        t0 = time.perf_counter()
        async with websockets.connect(url, max_size=None) as ws:
            await ws.recv()
            out.append((time.perf_counter() - t0) * 1000)
    return out


def _block(url: str, spec: RequestSpec, requests: int) -> list[float]:
    with tqdm(total=requests, disable=True) as progress:
        level = asyncio.run(run_level(url, None, spec, 1, requests, progress))
    failed = [r.error for r in level.results if not r.ok]
    if failed:
        raise SystemExit(f"{url}: {len(failed)} request(s) failed: {failed[0]}")
    return [r.ttfa_ms for r in level.results if r.ttfa_ms is not None]


def run(args: argparse.Namespace) -> dict[str, Any]:
    import ray

    spec = RequestSpec(sample_rate=24000)
    per_block = max(1, args.requests // args.blocks)
    ttfa: dict[str, list[float]] = {"direct": [], "ray_serve": []}
    connect: dict[str, list[float]] = {"direct": [], "ray_serve": []}
    with spawn_server(args.config, load_generator=True) as direct:
        try:
            urls = {"direct": direct.url, "ray_serve": _deploy_on_ray(args.config, free_port())}
            for url in urls.values():
                _block(url, spec, args.warmup)
            for _ in range(args.blocks):
                for name, url in urls.items():
                    ttfa[name] += _block(url, spec, per_block)
                    connect[name] += asyncio.run(_connect_ms(url, per_block))
        finally:
            from ray import serve

            serve.shutdown()
            ray.shutdown()
    summary = {name: summarize(values) for name, values in ttfa.items()}
    p50 = {name: s["p50"] for name, s in summary.items()}
    report = {
        "name": "ray-proxy",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m bench.ray_proxy " + " ".join(sys.argv[1:]),
        "config": {
            "model": args.config,
            "requests_per_target": per_block * args.blocks,
            "blocks": args.blocks,
            "warmup": args.warmup,
            "concurrency": 1,
            "ray": ray.__version__,
        },
        "machine": {**machine_info(), "host": socket.gethostname()},
        "definitions": {
            "ttfa_ms": "flush of the first clause sent -> first audio chunk received "
            "(bench.loadgen's requests: word pieces streamed in, a new connection each)",
            "connect_ms": "WebSocket upgrade until session.created",
            "direct": "voiceserver serve (one process) on loopback",
            "ray_serve": "the same model as one Ray Serve replica behind Serve's HTTP proxy "
            "(voiceserver.ray_serve) on loopback",
        },
        "ttfa_ms": summary,
        "connect_ms": {name: summarize(values) for name, values in connect.items()},
        "proxy_overhead_ttfa_p50_ms": (
            p50["ray_serve"] - p50["direct"] if None not in p50.values() else None
        ),
        "samples": {"ttfa_ms": ttfa, "connect_ms": connect},
    }
    write_json(report, args.out)
    return report


def main(argv: list[str] | None = None) -> None:
    report = run(_parser().parse_args(argv))
    for metric in ("ttfa_ms", "connect_ms"):
        for name, s in report[metric].items():
            print(
                f"{metric:<10} {name:<10} p50 {s['p50']:7.1f}  p95 {s['p95']:7.1f}  "
                f"mean {s['mean']:7.1f}  n={len(report['samples'][metric][name])}"
            )
    print(f"proxy overhead (TTFA p50): {report['proxy_overhead_ttfa_p50_ms']:.1f} ms")


if __name__ == "__main__":
    main()
