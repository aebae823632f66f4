"""Load generator: concurrent streaming sessions against a voice server, measured at the client.

Run ``python -m bench.loadgen --help``; bench/README.md explains the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm import tqdm
from voiceclient import VoiceClient, VoiceServerError

from bench.cli import add_report_arguments, add_speech_arguments, add_target_arguments
from bench.measure import RequestResult
from bench.report import format_table, machine_info, write_json, write_plot
from bench.request import RequestSpec, failed_request, run_request, spec_for_server
from bench.spawn import spawn_server
from bench.stats import LevelResult
from bench.texts import FIRST_CLAUSE_WORDS, SENTENCES, text_for

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.loadgen",
        description=(
            "Open N concurrent sessions, stream built-in English sentences word by word "
            "(flush after the first 10-word clause), and measure time to first audio, "
            "real-time factor, underruns and throughput at the client."
        ),
    )
    add_target_arguments(parser, "load")
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[1, 4, 16],
        help="concurrent sessions per level, run one level after another (default 1 4 16)",
    )
    parser.add_argument(
        "--requests-per-level",
        type=int,
        default=None,
        help="requests per level (default: 2 x concurrency, at least 4)",
    )
    add_speech_arguments(
        parser, warmup_help="unmeasured requests before the first level", timeout_s=120.0
    )
    add_report_arguments(parser, "loadgen")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def requests_for(concurrency: int, requested: int | None) -> int:
    return requested if requested is not None else max(4, 2 * concurrency)


async def run_level(
    url: str,
    api_key: str | None,
    spec: RequestSpec,
    concurrency: int,
    requests: int,
    progress: tqdm,
) -> LevelResult:
    """``concurrency`` sessions take requests from one counter until ``requests`` ran."""
    clients = await asyncio.gather(*(VoiceClient.connect(url, api_key) for _ in range(concurrency)))
    counter = itertools.count()
    results: list[RequestResult] = []

    async def worker(vc: VoiceClient) -> None:
        while (index := next(counter)) < requests:
            if vc.closed:
                try:
                    vc = await VoiceClient.connect(url, api_key)
                    clients.append(vc)
                except VoiceServerError as err:
                    results.append(failed_request(index, concurrency, f"{err.code}: {err.message}"))
                    progress.update(1)
                    continue
            result = await run_request(vc, text_for(index), spec, index, concurrency)
            results.append(result)
            if result.ttfa_ms is not None:
                progress.set_postfix_str(f"ttfa {result.ttfa_ms:.0f} ms", refresh=False)
            progress.update(1)

    started = time.monotonic()
    try:
        await asyncio.gather(*(worker(vc) for vc in clients))
    finally:
        ended = time.monotonic()
        for vc in clients:
            await vc.close()
    results.sort(key=lambda r: r.index)
    return LevelResult(concurrency, tuple(results), started, ended)


async def run_all(
    url: str, api_key: str | None, spec: RequestSpec, args: argparse.Namespace
) -> list[LevelResult]:
    if args.warmup > 0:
        async with VoiceClient.connect(url, api_key) as vc:
            for i in range(args.warmup):
                await run_request(vc, text_for(i), spec)
    levels = []
    for concurrency in args.concurrency:
        requests = requests_for(concurrency, args.requests_per_level)
        with tqdm(
            total=requests, desc=f"concurrency {concurrency:>3}", unit="req", disable=args.quiet
        ) as progress:
            levels.append(await run_level(url, api_key, spec, concurrency, requests, progress))
    return levels


@contextlib.contextmanager
def _target(args: argparse.Namespace) -> Iterator[str]:
    if args.spawn:
        print(f"starting voiceserver serve --config {args.spawn} ...", file=sys.stderr)
        with spawn_server(args.spawn, options=tuple(args.server_option)) as server:
            yield server.url
    else:
        yield args.url


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run every level; write the JSON (and PNG) and return the report."""
    machine = machine_info()
    out: Path = args.out or RESULTS_DIR / f"loadgen-{datetime.now():%Y%m%d-%H%M%S}.json"
    with _target(args) as url:
        model, spec = spec_for_server(url, args)
        origin = time.monotonic()
        levels = asyncio.run(run_all(url, args.api_key, spec, args))
    report: dict[str, Any] = {
        "name": args.name or out.stem,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": {
            "url": url,
            "spawn": args.spawn,
            "server_options": list(args.server_option),
            "model": dataclasses.asdict(model) if model is not None else None,
            "concurrency": list(args.concurrency),
            "requests_per_level": [
                requests_for(c, args.requests_per_level) for c in args.concurrency
            ],
            "tokens_per_s": args.tokens_per_s,
            "voice": args.voice,
            "sample_rate": spec.sample_rate,
            "encoding": "pcm_s16le",
            "first_clause_words": FIRST_CLAUSE_WORDS,
            "texts": len(SENTENCES),
            "warmup": args.warmup,
            "timeout_s": args.timeout,
        },
        "machine": {**machine, "load_average_1m_after": machine_info()["load_average_1m"]},
        "definitions": {
            "ttfa_ms": "flush of the first clause sent -> first audio chunk received",
            "rtf": "(last audio chunk received - first text sent) / audio seconds",
            "underruns": "chunks that arrived after the audio before them ran out, for a "
            "player that starts at the first chunk and plays at real time",
            "stall_ms": "total time such a player waited for late chunks",
            "x_real_time": "audio seconds of the level / wall seconds of the level",
        },
        "levels": [level.to_json(origin) for level in levels],
    }
    write_json(report, out)
    print(format_table(report))
    print(f"report: {out}")
    if not args.no_plot:
        plot = out.with_suffix(".png")
        write_plot(report, plot)
        print(f"plot:   {plot}")
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.server_option and not args.spawn:
        raise SystemExit("--server-option only applies with --spawn")
    if min(args.concurrency) < 1:
        raise SystemExit("--concurrency values must be at least 1")
    try:
        return run(args)
    except VoiceServerError as err:
        raise SystemExit(f"bench.loadgen: {err.code}: {err.message}") from None


if __name__ == "__main__":
    main()
