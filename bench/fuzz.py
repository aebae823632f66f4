"""Protocol fuzzer against a spawned (or running) server: 10,000+ hostile messages.

Run ``python -m bench.fuzz --messages 10000 [--seed N]``; the generators, the driver and
the oracles live in the :mod:`bench.fuzzing` package (shared with
tests/e2e/test_protocol_fuzz.py), and bench/README.md explains the output.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.fuzzing import FuzzConfig, Fuzzer, FuzzReport, discover, process_cpu_seconds
from bench.spawn import spawn_server

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fuzz",
        description=(
            "Fuzz both WebSocket endpoints with hypothesis-generated hostile messages while a "
            "bystander session speaks; check that the server survives, answers every invalid "
            "message with a fitting error, keeps the bystander's audio byte-identical and "
            "keeps protocol order."
        ),
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument(
        "--config",
        default="tiny",
        help="spawn `voiceserver serve --config CONFIG` on a free port (default: tiny)",
    )
    target.add_argument(
        "--url", help="fuzz a server that is already running, e.g. http://127.0.0.1:8000"
    )
    parser.add_argument(
        "--server-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --config: pass --option KEY=VALUE to the server",
    )
    parser.add_argument(
        "--server-pid",
        type=int,
        default=None,
        help="with --url: the server's pid, to read its CPU time for the busy-loop check",
    )
    parser.add_argument("--messages", type=int, default=10_000, help="fuzz messages to send")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0)")
    parser.add_argument("--native-sessions", type=int, default=4)
    parser.add_argument("--compat-sessions", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40, help="steps per native session")
    parser.add_argument("--compat-steps", type=int, default=20)
    parser.add_argument(
        "--replay-budget",
        type=int,
        default=300,
        help="fresh-session replays allowed to minimize findings (default 300)",
    )
    parser.add_argument(
        "--flood-source",
        default="127.0.0.3",
        help="local address the flooder connects from (a client apart from the bystander;"
        " a loopback server answers every 127.x address); 'none': the default address",
    )
    parser.add_argument("--no-flood", action="store_true", help="no flooder during the barrages")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the JSON report (default bench/results/fuzz-TIME.json)",
    )
    return parser


@contextmanager
def _target(args: argparse.Namespace) -> Iterator[tuple[str, Callable[[], float] | None]]:
    if args.url:
        cpu = process_cpu_seconds(args.server_pid) if args.server_pid else None
        yield args.url.rstrip("/"), cpu
        return
    with spawn_server(args.config, options=tuple(args.server_option)) as server:
        yield server.http, process_cpu_seconds(server.pid) if server.pid else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    with _target(args) as (http, cpu):
        facts = asyncio.run(discover(http))
        config = FuzzConfig(
            native_sessions=args.native_sessions,
            compat_sessions=args.compat_sessions,
            steps=args.steps,
            compat_steps=args.compat_steps,
            seed=args.seed,
            replay_budget=args.replay_budget,
            cpu_seconds=cpu,
            flood=not args.no_flood,
            flood_source=None if args.flood_source == "none" else args.flood_source,
        )
        fuzzer = Fuzzer(facts, config)
        fuzzer.prepare()
        batch = 0
        while fuzzer.report.messages < args.messages:
            report = fuzzer.report
            per_example = (
                2 * args.native_sessions * args.steps + args.compat_sessions * args.compat_steps
            )
            examples = math.ceil((args.messages - report.messages) / per_example) + 1
            # A new seed per batch: the same seed would replay the same examples.
            fuzzer.explore(examples, seed=args.seed + batch, stop_after=args.messages)
            batch += 1
            print(
                f"{report.messages} messages sent in {report.examples} barrages, "
                f"{len(report.findings)} distinct findings",
                file=sys.stderr,
            )
        report = fuzzer.finish()
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "target": args.url or f"spawned --config {args.config}",
        "seed": args.seed,
        "server": dataclasses.asdict(facts),
        "fuzz_config": {k: v for k, v in dataclasses.asdict(config).items() if k != "cpu_seconds"},
        **report.summary(),
        "bystander_audio_identical": _bystander_identical(report),
    }


def _bystander_identical(report: FuzzReport) -> bool | None:
    if not report.bystander.get("reference_stable"):
        return None
    return not report.of_kind("bystander_audio")


def headline(summary: dict[str, Any]) -> dict[str, Any]:
    """What the console shows: the counts and one line per finding."""
    keys = (
        "messages_sent",
        "messages_by_endpoint",
        "errors_by_code",
        "closes_by_code",
        "server_alive",
        "bystander_audio_identical",
        "bystander",
        "busy_loop",
        "duration_s",
    )
    brief = {k: summary[k] for k in keys}
    brief["findings"] = [
        f"[{f['endpoint']}] {f['kind']} @ {f['label']} (x{f['count']}): {f['detail']}"
        for f in summary["findings"]
    ]
    return brief


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    summary = run(args)
    out = args.out or RESULTS_DIR / f"fuzz-{datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(headline(summary), indent=2, ensure_ascii=False))
    print(f"full report: {out}", file=sys.stderr)
    clean = summary["server_alive"] and not summary["findings"]
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
