"""Command-line options the bench tools share: which server, what to ask, where to report."""

from __future__ import annotations

import argparse
from pathlib import Path

from protocol.messages import PCM_SAMPLE_RATES

DEFAULT_URL = "ws://127.0.0.1:8000/v1/audio/speech/ws"


def add_target_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """``--url`` or ``--spawn CONFIG`` (with ``--server-option``), and ``--api-key``."""
    target = parser.add_mutually_exclusive_group()
    target.add_argument(
        "--url", default=DEFAULT_URL, help=f"server to {verb} (default {DEFAULT_URL})"
    )
    target.add_argument(
        "--spawn",
        metavar="CONFIG",
        default=None,
        help="start `voiceserver serve --config CONFIG` on a free port, stop it at the end",
    )
    parser.add_argument(
        "--server-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --spawn: pass --option KEY=VALUE to the server",
    )
    parser.add_argument(
        "--server-engine",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --spawn: pass --engine KEY=VALUE to the server (e.g. max_ar_batch=1024)",
    )
    parser.add_argument(
        "--server-engines",
        type=int,
        default=None,
        metavar="N",
        help="with --spawn: run N engine processes (serve --engines N); default: the"
        " engine as a thread of the server's process",
    )
    parser.add_argument("--api-key", default=None)


def add_spawn_model_argument(parser: argparse.ArgumentParser) -> None:
    """``--spawn-model DIR``: spawn the server on a checkpoint directory (with or without
    ``--spawn CONFIG``)."""
    parser.add_argument(
        "--spawn-model",
        metavar="DIR",
        type=Path,
        default=None,
        help="start `voiceserver serve --model DIR` (a checkpoint directory) on a free port, "
        "stop it at the end; with --spawn CONFIG that config is used, else the server picks "
        "the config that fits the checkpoint; --server-option KEY=VALUE passes model options",
    )


def add_speech_arguments(
    parser: argparse.ArgumentParser,
    *,
    warmup_help: str,
    timeout_s: float,
    tokens_per_s: float = 0.0,
) -> None:
    """How each request speaks: pacing, voice, rate, warm-up and timeout."""
    pace = f"{tokens_per_s:g}" if tokens_per_s else "0: as fast as possible"
    parser.add_argument(
        "--tokens-per-s",
        type=float,
        default=tokens_per_s,
        help=f"word pieces per second per session, like an LLM (default {pace})",
    )
    parser.add_argument("--voice", default=None, help="voice (default: the model's)")
    parser.add_argument(
        "--sample-rate",
        type=int,
        choices=PCM_SAMPLE_RATES,
        default=None,
        help="output rate (default: the model's own, so the server does not resample)",
    )
    parser.add_argument("--warmup", type=int, default=1, help=warmup_help)
    parser.add_argument(
        "--timeout",
        type=float,
        default=timeout_s,
        help=f"seconds per request (default {timeout_s:g})",
    )


def add_report_arguments(parser: argparse.ArgumentParser, tool: str) -> None:
    """``--out``, ``--name`` and ``--no-plot``."""
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"JSON report (default bench/results/{tool}-TIME.json)",
    )
    parser.add_argument("--name", default=None, help="report name (default: the file's stem)")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG plot")
