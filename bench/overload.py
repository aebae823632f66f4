"""Overload: ramp streaming sessions past the engine's capacity and check admission control.

Each session holds one long context streamed like an LLM's output and is played in real
time at the client. Sessions that get a model slot must keep playing without underruns;
the rest must be refused at once (``overloaded`` for the context, or close 1013 for a
socket opened while the engine is full) instead of queueing and stalling everyone.

Run ``python -m bench.overload --help``; bench/README.md explains the report.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import math
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import websockets
from voiceclient import VoiceClient, VoiceServerError
from voiceclient.errors import VoiceConnectionError
from voiceclient.server_info import get_json, http_base

from bench.cli import add_report_arguments, add_speech_arguments
from bench.loadgen import RESULTS_DIR
from bench.measure import Arrival, RequestResult, count_underruns
from bench.report import machine_info, server_log_summary, write_json
from bench.request import RequestSpec, run_request, spec_for_server
from bench.spawn import spawn_server
from bench.stats import summarize
from bench.texts import FIRST_CLAUSE_WORDS, SENTENCES, text_for
from protocol.errors import CloseCode, ErrorCode

DEFAULT_SPAWN = "tiny"
DEFAULT_SLOTS = 8
START_DELAY_S = 0.2
"""Between the last upfront connect (or the warm-up) and the first context."""
IDLE_WAIT_S = 5.0
HEALTH_TIMEOUT_S = 2.0
OVERLOADED = str(ErrorCode.OVERLOADED)
TRY_AGAIN_LATER = int(CloseCode.TRY_AGAIN_LATER)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.overload",
        description=(
            "Open sessions one after another past the server's capacity, each streaming one "
            "long text like an LLM and playing its audio in real time at the client. Admitted "
            "streams must not underrun; the rest must be refused at once (`overloaded`, or "
            "close 1013). Exits 1 otherwise."
        ),
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument(
        "--spawn",
        metavar="CONFIG",
        default=None,
        help=f"start `voiceserver serve --config CONFIG` on a free port (default {DEFAULT_SPAWN})",
    )
    target.add_argument("--url", default=None, help="use the speech WebSocket of a running server")
    parser.add_argument(
        "--slots",
        type=int,
        default=None,
        help=f"the engine's model slots: with --spawn, passed as --option max_contexts=N "
        f"(default {DEFAULT_SLOTS}); with --url, the capacity to expect (default: unknown)",
    )
    parser.add_argument(
        "--server-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --spawn: another --option KEY=VALUE for the server",
    )
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--sessions", type=int, default=16, help="sessions to open (default 16)")
    parser.add_argument(
        "--interval-s",
        type=float,
        default=0.25,
        help="seconds between one session's context and the next (default 0.25)",
    )
    parser.add_argument(
        "--connect",
        choices=("upfront", "ramp"),
        default="upfront",
        help="upfront (default): open every socket first, then start the contexts on the ramp, "
        "so a refusal is the context's `overloaded`; ramp: open each socket at its turn, so "
        "a socket opened while the engine is full is closed with 1013",
    )
    parser.add_argument(
        "--words",
        type=int,
        default=300,
        help="words per session's text, whole built-in sentences (default 300)",
    )
    add_speech_arguments(
        parser,
        warmup_help="unmeasured requests before the ramp (default 1)",
        timeout_s=120.0,
        tokens_per_s=20.0,
    )
    parser.add_argument(
        "--prebuffer-ms",
        type=float,
        default=100.0,
        help="the client's player starts this long after the first chunk arrives (default 100; "
        "0 is bench.loadgen's player)",
    )
    parser.add_argument(
        "--max-refusal-ms",
        type=float,
        default=1000.0,
        help="a refusal slower than this fails the run (default 1000)",
    )
    parser.add_argument(
        "--sample-s",
        type=float,
        default=0.1,
        help="seconds between GET /health samples of the engine's slots (default 0.1)",
    )
    add_report_arguments(parser, "overload")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def long_text(index: int, words: int) -> str:
    """Whole built-in sentences, starting at a different one per session, until ``words``."""
    sentences: list[str] = []
    count = 0
    while count < words:
        sentence = text_for(index + len(sentences))
        sentences.append(sentence)
        count += len(sentence.split())
    return " ".join(sentences)


@dataclasses.dataclass(slots=True)
class Session:
    """One session of the ramp. Times are ``time.monotonic()`` seconds."""

    index: int
    planned_s: float
    """When its context is due, in seconds after the ramp started."""
    text: str
    client: VoiceClient | None = None
    connect_started: float | None = None
    connect_ms: float | None = None
    context_sent: float | None = None
    answered: float | None = None
    """When ``run_request`` came back: for a refusal, when the error arrived."""
    outcome: str = "pending"
    refused_by: str | None = None
    refusal_ms: float | None = None
    error: str | None = None
    close_code: int | None = None
    alive_at_end: bool | None = None
    session_errors: int = 0
    result: RequestResult | None = None
    arrivals: list[Arrival] = dataclasses.field(default_factory=list)


def _handshake_close_code(err: VoiceConnectionError) -> int | None:
    """The close code of a socket the server closed before ``session.created``: the
    client reports it only in its message, the websockets exception carries it."""
    if err.close_code is not None:
        return err.close_code
    cause = err.__cause__
    if isinstance(cause, websockets.ConnectionClosed) and cause.rcvd is not None:
        return cause.rcvd.code
    return None


class Overload:
    """One run's state, shared by its tasks."""

    def __init__(
        self, args: argparse.Namespace, url: str, spec: RequestSpec, capacity: int | None
    ) -> None:
        self.args = args
        self.url = url
        self.spec = spec
        self.capacity = capacity
        self.origin = time.monotonic()
        self.ramp_started = self.origin
        self.ramp_ended = self.origin
        self.sessions = [
            Session(i, i * args.interval_s, long_text(i, args.words)) for i in range(args.sessions)
        ]
        self.health: dict[str, list[Any]] = {
            "t_s": [],
            "active_slots": [],
            "active_contexts": [],
            "sessions": [],
        }
        self.health_failures = 0
        self.warmup_errors: list[str] = []
        self.stop = asyncio.Event()

    def say(self, line: str) -> None:
        if not self.args.quiet:
            print(f"[{time.monotonic() - self.origin:6.2f} s] {line}", file=sys.stderr, flush=True)

    async def _get_health(self) -> dict[str, Any] | None:
        try:
            body = await asyncio.to_thread(
                get_json, f"{http_base(self.url)}/health", self.args.api_key, HEALTH_TIMEOUT_S
            )
        except (OSError, ValueError):
            self.health_failures += 1
            return None
        return body if isinstance(body, dict) else None

    async def sampler(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            body = await self._get_health()
            engine = (body or {}).get("engine") or {}
            self.health["t_s"].append(round(started - self.origin, 3))
            self.health["active_slots"].append(engine.get("active_slots"))
            self.health["active_contexts"].append(engine.get("active_contexts"))
            self.health["sessions"].append((body or {}).get("sessions"))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), self.args.sample_s)

    async def warm_up(self) -> None:
        if self.args.warmup <= 0:
            return
        async with VoiceClient.connect(self.url, self.args.api_key) as client:
            for i in range(self.args.warmup):
                result = await run_request(client, text_for(i), self.spec)
                if not result.ok:
                    self.warmup_errors.append(result.error or "no_audio")
                    self.say(f"warm-up request failed: {result.error or 'no audio'}")
                    if client.closed:
                        break
        # A slot still held by the warm-up would make the first refusal come one early.
        deadline = time.monotonic() + IDLE_WAIT_S
        while time.monotonic() < deadline:
            body = await self._get_health()
            if body is None or not (body.get("engine") or {}).get("active_slots"):
                return
            await asyncio.sleep(0.05)
        self.say("the engine still had slots in use after the warm-up")

    async def connect(self, session: Session) -> bool:
        session.connect_started = time.monotonic()
        try:
            session.client = await VoiceClient.connect(self.url, self.args.api_key)
        except VoiceConnectionError as err:
            now = time.monotonic()
            session.connect_ms = (now - session.connect_started) * 1000.0
            session.close_code = _handshake_close_code(err)
            if session.close_code == TRY_AGAIN_LATER:
                session.outcome, session.refused_by = "refused", "close_1013"
                session.answered = now
                session.refusal_ms = session.connect_ms
                self.say(
                    f"session {session.index}: closed with 1013 in {session.connect_ms:.1f} ms"
                )
            else:
                session.outcome, session.error = "failed", f"{err.code}: {err.message}"
                self.say(f"session {session.index}: could not connect: {session.error}")
            return False
        session.connect_ms = (time.monotonic() - session.connect_started) * 1000.0
        return True

    async def run_session(self, session: Session) -> None:
        await _sleep_until(self.ramp_started + session.planned_s)
        if session.outcome != "pending":
            return  # its socket was refused or failed before the ramp
        if session.client is None and not await self.connect(session):
            return
        assert session.client is not None
        session.context_sent = time.monotonic()
        result = await run_request(
            session.client,
            session.text,
            self.spec,
            session.index,
            self.args.sessions,
            session.arrivals,
        )
        session.answered = time.monotonic()
        session.result = result
        if result.error is not None and result.error.split(":", 1)[0] == OVERLOADED:
            session.outcome, session.refused_by = "refused", OVERLOADED
            session.refusal_ms = (session.answered - session.context_sent) * 1000.0
            self.say(f"session {session.index}: overloaded in {session.refusal_ms:.1f} ms")
        elif result.ok:
            session.outcome = "admitted"
            late = count_underruns(delayed_start(session.arrivals, self.args.prebuffer_ms)).count
            self.say(
                f"session {session.index}: done, {result.audio_s:.1f} s of audio, "
                f"{late} underruns ({result.underruns} without the prebuffer)"
            )
        else:
            session.outcome, session.error = "failed", result.error or "no audio"
            self.say(f"session {session.index}: failed: {session.error}")

    async def finish_session(self, session: Session) -> None:
        client = session.client
        if client is None:
            return
        session.session_errors = len(client.session_errors)
        if client.closed:
            session.alive_at_end = False
            # A closed client re-raises what closed it on any send.
            try:
                await client.keepalive()
            except VoiceConnectionError as err:
                session.close_code = err.close_code
            except VoiceServerError:
                pass
        else:
            try:
                await client.keepalive()
                session.alive_at_end = True
            except VoiceServerError:
                session.alive_at_end = False
        await client.close()

    async def run(self) -> None:
        sampler = asyncio.create_task(self.sampler())
        try:
            await self.warm_up()
            if self.args.connect == "upfront":
                self.say(f"opening {len(self.sessions)} sockets")
                for session in self.sessions:
                    await self.connect(session)
            self.ramp_started = time.monotonic() + START_DELAY_S
            self.say(
                f"{len(self.sessions)} sessions, one every {self.args.interval_s:g} s, "
                f"{self.capacity if self.capacity is not None else '?'} slots"
            )
            tasks = [asyncio.create_task(self.run_session(s)) for s in self.sessions]
            try:
                await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
                self.ramp_ended = time.monotonic()
                await asyncio.gather(*(self.finish_session(s) for s in self.sessions))
        finally:
            self.stop.set()
            await sampler


def delayed_start(arrivals: Sequence[Arrival], prebuffer_ms: float) -> list[Arrival]:
    """The same chunks for a player that starts ``prebuffer_ms`` after the first one
    arrived: ``count_underruns`` starts its clock at the first chunk's arrival."""
    if not arrivals:
        return []
    first = arrivals[0]
    return [Arrival(first.at + prebuffer_ms / 1000.0, first.duration_s), *arrivals[1:]]


def underrun_times(arrivals: Sequence[Arrival]) -> list[float]:
    """Seconds after the first chunk at which each underrun ``count_underruns`` counts
    happened (measured on growing prefixes, so the definition stays in one place)."""
    times: list[float] = []
    seen = 0
    for end in range(1, len(arrivals) + 1):
        count = count_underruns(arrivals[:end]).count
        if count > seen:
            times.append(round(arrivals[end - 1].at - arrivals[0].at, 6))
            seen = count
    return times


async def _sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


def _rel(at: float | None, origin: float) -> float | None:
    return None if at is None else round(at - origin, 6)


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def session_json(session: Session, origin: float, prebuffer_ms: float) -> dict[str, Any]:
    """One session; times in seconds after the ramp started (``origin``)."""
    record: dict[str, Any] = {
        "index": session.index,
        "outcome": session.outcome,
        "refused_by": session.refused_by,
        "refusal_ms": _ms(session.refusal_ms),
        "error": session.error,
        "close_code": session.close_code,
        "alive_at_end": session.alive_at_end,
        "session_errors": session.session_errors,
        "planned_s": round(session.planned_s, 6),
        "connect_started_s": _rel(session.connect_started, origin),
        "connect_ms": _ms(session.connect_ms),
        "context_sent_s": _rel(session.context_sent, origin),
        "answered_s": _rel(session.answered, origin),
        "words": len(session.text.split()),
        "chars": len(session.text),
    }
    stream_keys = (
        "create_ms",
        "ttfa_ms",
        "ttfa_after_flush_ms",
        "underruns",
        "stall_ms",
        "underruns_no_prebuffer",
        "stall_ms_no_prebuffer",
        "underrun_at_s_no_prebuffer",
        "audio_s",
        "chunks",
        "rtf",
        "text_started_s",
        "first_audio_s",
        "last_audio_s",
        "playout_end_s",
    )
    r = session.result
    if session.outcome != "admitted" or r is None or r.first_audio_at is None:
        return record | dict.fromkeys(stream_keys)
    assert r.last_audio_at is not None and session.context_sent is not None
    played = count_underruns(delayed_start(session.arrivals, prebuffer_ms))
    playout_end = r.first_audio_at + (prebuffer_ms + played.stall_ms) / 1000.0 + r.audio_s
    return record | {
        "create_ms": _ms((r.started_at - session.context_sent) * 1000.0),
        "ttfa_ms": _ms((r.first_audio_at - r.started_at) * 1000.0),
        "ttfa_after_flush_ms": _ms(r.ttfa_ms),
        "underruns": played.count,
        "stall_ms": _ms(played.stall_ms),
        "underruns_no_prebuffer": r.underruns,
        "stall_ms_no_prebuffer": _ms(r.stall_ms),
        "underrun_at_s_no_prebuffer": underrun_times(session.arrivals),
        "audio_s": round(r.audio_s, 6),
        "chunks": r.chunks,
        "rtf": r.rtf,
        "text_started_s": _rel(r.started_at, origin),
        "first_audio_s": _rel(r.first_audio_at, origin),
        "last_audio_s": _rel(r.last_audio_at, origin),
        "playout_end_s": _rel(playout_end, origin),
    }


def _running_at(sessions: Sequence[dict[str, Any]], at: float) -> int:
    """Admitted streams between ``context.created`` and their last audio chunk at ``at``."""
    return sum(
        1
        for s in sessions
        if s["outcome"] == "admitted"
        and s["text_started_s"] is not None
        and s["last_audio_s"] is not None
        and s["text_started_s"] <= at <= s["last_audio_s"]
    )


def _index_ranges(indices: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2, 5``."""
    runs: list[list[int]] = []
    for index in indices:
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs) or "none"


def summarize_run(
    per_session: Sequence[dict[str, Any]],
    health: dict[str, list[Any]],
    capacity: int | None,
    max_refusal_ms: float,
    prebuffer_ms: float,
) -> dict[str, Any]:
    admitted = [s for s in per_session if s["outcome"] == "admitted"]
    refused = [s for s in per_session if s["outcome"] == "refused"]
    failed = [s for s in per_session if s["outcome"] not in ("admitted", "refused")]
    admitted_idx = [s["index"] for s in admitted]
    refused_idx = [s["index"] for s in refused]
    slow = [s for s in refused if s["refusal_ms"] is not None and s["refusal_ms"] > max_refusal_ms]
    underran = [s for s in admitted if s["underruns"]]
    expected = min(capacity, len(per_session)) if capacity is not None else None
    in_order = not admitted_idx or not refused_idx or max(admitted_idx) < min(refused_idx)
    running_at_refusal = [
        _running_at(per_session, s["answered_s"]) for s in refused if s["answered_s"] is not None
    ]
    slots = [v for v in health["active_slots"] if v is not None]
    overloaded_refused = [s for s in refused if s["refused_by"] == OVERLOADED]
    late_at = [t for s in admitted for t in s["underrun_at_s_no_prebuffer"] or ()]
    # Each admitted stream counts itself: the most streams it shared the engine with.
    max_running = max((_running_at(per_session, s["text_started_s"]) for s in admitted), default=0)

    failures = []
    if underran:
        failures.append(
            f"{len(underran)} admitted streams underran (sessions "
            f"{_index_ranges([s['index'] for s in underran])})"
        )
    if slow:
        failures.append(
            f"{len(slow)} refusals took over {max_refusal_ms:g} ms "
            f"(max {max(s['refusal_ms'] for s in slow):.0f} ms)"
        )
    if failed:
        failures.append(
            f"{len(failed)} sessions failed (first: session {failed[0]['index']}: "
            f"{failed[0]['error']})"
        )
    if capacity is not None and max_running > capacity:
        failures.append(f"{max_running} admitted streams ran at once with {capacity} slots")
    if per_session and not admitted:
        failures.append("no stream was admitted")
    closed = [s for s in overloaded_refused if s["alive_at_end"] is False]
    if closed:
        failures.append(f"{len(closed)} sessions were closed after an `overloaded` refusal")

    return {
        "passed": not failures,
        "failures": failures,
        "sessions": len(per_session),
        "capacity": capacity,
        "admitted": len(admitted),
        "refused": len(refused),
        "failed": len(failed),
        "refused_by": dict(Counter(s["refused_by"] for s in refused)),
        "admitted_indices": admitted_idx,
        "refused_indices": refused_idx,
        "failed_indices": [s["index"] for s in failed],
        "expected_admitted": expected,
        "admitted_as_expected": None
        if expected is None
        else len(admitted) == expected and in_order and not failed,
        "refused_after_admitted": in_order,
        "close_codes": dict(
            Counter(str(s["close_code"]) for s in per_session if s["close_code"] is not None)
        ),
        "refused_sessions_alive": sum(1 for s in overloaded_refused if s["alive_at_end"]),
        "overloaded_sessions": len(overloaded_refused),
        "ttfa_ms": summarize([s["ttfa_ms"] for s in admitted if s["ttfa_ms"] is not None]),
        "ttfa_after_flush_ms": summarize(
            [s["ttfa_after_flush_ms"] for s in admitted if s["ttfa_after_flush_ms"] is not None]
        ),
        "create_ms": summarize([s["create_ms"] for s in admitted if s["create_ms"] is not None]),
        "underruns_total": sum(s["underruns"] or 0 for s in admitted),
        "streams_with_underruns": len(underran),
        "stall_ms_total": sum(s["stall_ms"] or 0.0 for s in admitted),
        "prebuffer_ms": prebuffer_ms,
        "no_prebuffer": {
            "underruns_total": sum(s["underruns_no_prebuffer"] or 0 for s in admitted),
            "streams_with_underruns": sum(1 for s in admitted if s["underruns_no_prebuffer"]),
            "stall_ms_total": sum(s["stall_ms_no_prebuffer"] or 0.0 for s in admitted),
            "last_underrun_at_s": max(late_at) if late_at else None,
        },
        "audio_s": summarize([s["audio_s"] for s in admitted if s["audio_s"] is not None]),
        "refusal_ms": summarize([s["refusal_ms"] for s in refused if s["refusal_ms"] is not None]),
        "refusals_over_limit": len(slow),
        "max_refusal_ms": max_refusal_ms,
        "max_admitted_running": max_running,
        "admitted_running_at_refusal": {
            "min": min(running_at_refusal) if running_at_refusal else None,
            "max": max(running_at_refusal) if running_at_refusal else None,
        },
        "peak_active_slots": max(slots) if slots else None,
    }


def _fmt(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def format_summary(report: dict[str, Any]) -> str:
    """A table of sessions, a few summary lines, then PASS or FAIL with the reasons."""
    cfg, s = report["config"], report["summary"]
    model = (cfg.get("model") or {}).get("id", "?")
    connect = (
        "sockets opened up front" if cfg["connect"] == "upfront" else "sockets opened on the ramp"
    )
    lines = [
        f"overload {report['name']}: {model}, {_fmt(s['capacity'], 'd')} slots, "
        f"{s['sessions']} sessions one every {cfg['interval_s']:g} s ({connect}), "
        f"{cfg['words']} words each at {cfg['tokens_per_s']:g} words/s",
        f"{'session':>7} {'outcome':<22} {'answer ms':>9} {'TTFA ms':>8} {'underruns':>9} "
        f"{'stall ms':>8} {'at once':>7} {'audio s':>7}",
    ]
    for p in report["per_session"]:
        outcome = p["outcome"] + (f" ({p['refused_by']})" if p["refused_by"] else "")
        answer = p["refusal_ms"] if p["outcome"] == "refused" else p["create_ms"]
        lines.append(
            f"{p['index']:>7} {outcome:<22} {_fmt(answer, '.1f'):>9} {_fmt(p['ttfa_ms']):>8} "
            f"{_fmt(p['underruns'], 'd'):>9} {_fmt(p['stall_ms']):>8} "
            f"{_fmt(p['underruns_no_prebuffer'], 'd'):>7} {_fmt(p['audio_s'], '.1f'):>7}"
        )
    ttfa, refusal, create = s["ttfa_ms"], s["refusal_ms"], s["create_ms"]
    raw = s["no_prebuffer"]
    running = s["admitted_running_at_refusal"]
    by = ", ".join(f"{k} {v}" for k, v in sorted(s["refused_by"].items())) or "none"
    lines += [
        f"admitted {s['admitted']}/{s['sessions']} "
        f"(sessions {_index_ranges(s['admitted_indices'])}; "
        f"at most {s['max_admitted_running']} at once) | created in p50 "
        f"{_fmt(create['p50'], '.1f')} ms | TTFA p50 {_fmt(ttfa['p50'])} "
        f"max {_fmt(ttfa['max'])} ms",
        f"playback {s['underruns_total']} underruns in {s['streams_with_underruns']} streams, "
        f"stall {s['stall_ms_total']:.0f} ms (player starting {s['prebuffer_ms']:g} ms after "
        f"the first chunk) | starting at once: {raw['underruns_total']} in "
        f"{raw['streams_with_underruns']} streams, stall {raw['stall_ms_total']:.0f} ms, the "
        f"last {_fmt(raw['last_underrun_at_s'], '.2f')} s after the first chunk",
        f"refused  {s['refused']}/{s['sessions']} "
        f"(sessions {_index_ranges(s['refused_indices'])}; {by}) | refusal p50 "
        f"{_fmt(refusal['p50'], '.1f')} max {_fmt(refusal['max'], '.1f')} ms "
        f"(limit {s['max_refusal_ms']:g}) | admitted streams running at each refusal: "
        f"{_fmt(running['min'], 'd')}-{_fmt(running['max'], 'd')} | "
        f"{s['refused_sessions_alive']}/{s['overloaded_sessions']} refused sessions still open",
        f"server   peak active slots {_fmt(s['peak_active_slots'], 'd')} (GET /health) | "
        f"failed sessions {s['failed']} | close codes {s['close_codes'] or 'none'}",
    ]
    if s["admitted_as_expected"] is False:
        lines.append(
            f"note     expected the first {s['expected_admitted']} sessions admitted and the "
            f"rest refused"
        )
    lines.append("PASS" if s["passed"] else "FAIL: " + "; ".join(s["failures"]))
    return "\n".join(lines)


def _nan(values: Sequence[float | None]) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def write_overload_plot(report: dict[str, Any], path: Path) -> None:
    """Per session: what happened when, TTFA and underruns, how fast the answer came."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sessions, s = report["per_session"], report["summary"]
    admitted = [p for p in sessions if p["outcome"] == "admitted"]
    refused = [p for p in sessions if p["outcome"] == "refused"]
    failed = [p for p in sessions if p["outcome"] not in ("admitted", "refused")]
    fig, (timeline, ttfa_ax, answer_ax) = plt.subplots(3, 1, figsize=(11, 10), sharex=True)

    for p in admitted:
        timeline.vlines(
            p["index"], p["last_audio_s"], p["playout_end_s"], color="C2", alpha=0.35, lw=6
        )
        timeline.vlines(p["index"], p["text_started_s"], p["last_audio_s"], color="C2", lw=6)
    timeline.plot([], [], color="C2", lw=6, label="admitted: streaming")
    timeline.plot([], [], color="C2", alpha=0.35, lw=6, label="admitted: playing out")
    for code, marker in ((OVERLOADED, "x"), ("close_1013", "s")):
        group = [p for p in refused if p["refused_by"] == code]
        if group:
            timeline.plot(
                [p["index"] for p in group],
                [p["answered_s"] for p in group],
                marker,
                color="C3",
                ms=9,
                label=f"refused: {code}",
            )
    if failed:
        timeline.plot(
            [p["index"] for p in failed],
            [p["answered_s"] or p["planned_s"] for p in failed],
            "k^",
            label="failed",
        )
    timeline.set(ylabel="seconds after the ramp started", title="sessions over time")
    timeline.legend(loc="upper right", fontsize=8)

    xs = [p["index"] for p in admitted]
    ttfa_ax.bar(xs, _nan([p["ttfa_ms"] for p in admitted]), color="C0", label="TTFA")
    ttfa_ax.set(ylabel="time to first audio (ms)", title="admitted streams: TTFA and underruns")
    under_ax = ttfa_ax.twinx()
    under_ax.plot(
        xs,
        [p["underruns_no_prebuffer"] for p in admitted],
        "o",
        color="C3",
        mfc="none",
        ms=9,
        label="underruns, player starting at once",
        clip_on=False,
    )
    under_ax.plot(
        xs,
        [p["underruns"] for p in admitted],
        "o",
        color="C3",
        label=f"underruns, player starting {s['prebuffer_ms']:g} ms in",
        clip_on=False,
    )
    under_ax.set_ylabel("underruns")
    most = max([1, *(p["underruns_no_prebuffer"] or 0 for p in admitted)])
    under_ax.set_ylim(bottom=0, top=most * 1.2)
    ttfa_ax.legend(loc="upper left", fontsize=8)
    under_ax.legend(loc="upper right", fontsize=8)

    answer_ax.bar(
        [p["index"] for p in refused],
        _nan([p["refusal_ms"] for p in refused]),
        color="C3",
        label="refusal (context.create -> error, or connect -> close 1013)",
    )
    answer_ax.bar(
        xs,
        _nan([p["create_ms"] for p in admitted]),
        color="C2",
        label="admission (context.create -> context.created)",
    )
    answer_ax.axhline(s["max_refusal_ms"], color="C3", ls="--", lw=1, label="refusal limit")
    answer_ax.set_yscale("log")
    answer_ax.set(ylabel="answer time (ms)", xlabel="session", title="how fast the answer came")
    answer_ax.legend(loc="upper left", fontsize=8)

    for ax in (timeline, ttfa_ax, answer_ax):
        ax.grid(True, alpha=0.3)
    for ax in (timeline, ttfa_ax):
        ax.set_ylim(bottom=0)
    indices = [p["index"] for p in sessions]
    answer_ax.set_xticks(indices, [str(i) for i in indices])
    if s["capacity"] is not None and s["capacity"] < len(sessions):
        for ax in (timeline, ttfa_ax, answer_ax):
            ax.axvline(s["capacity"] - 0.5, color="grey", ls=":", lw=1)
    model = (report["config"].get("model") or {}).get("id", "?")
    fig.suptitle(
        f"{report['name']}: {model}, {s['admitted']} admitted / {s['refused']} refused of "
        f"{s['sessions']} ({'PASS' if s['passed'] else 'FAIL'})"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


@contextlib.contextmanager
def _target(args: argparse.Namespace) -> Iterator[tuple[str, Path | None]]:
    if args.url:
        yield args.url, None
        return
    options = (f"max_contexts={args.slots}", *args.server_option)
    print(
        f"starting voiceserver serve --config {args.spawn} --option max_contexts={args.slots} ...",
        file=sys.stderr,
    )
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(
                spawn_server(args.spawn, options=options, load_generator=True)
            )
        except RuntimeError as exc:
            raise SystemExit(f"bench.overload: {exc}") from None
        yield server.url, server.log_path


DEFINITIONS = {
    "admitted": "the context was created and its audio arrived to the end (context.done)",
    "refused": "the server answered the context.create with an `overloaded` error "
    "(refused_by overloaded), or closed the socket with 1013 before session.created "
    "(refused_by close_1013)",
    "refusal_ms": "context.create sent -> error received; for close_1013, connect started -> "
    "close received",
    "create_ms": "context.create sent -> context.created received",
    "ttfa_ms": "first text.append sent -> first audio chunk received",
    "ttfa_after_flush_ms": "flush of the first clause sent -> first audio chunk received "
    "(bench.loadgen's TTFA; negative when a model speaks before the flush)",
    "underruns": "chunks that arrived after the audio before them ran out, for a player that "
    "starts prebuffer_ms after the first chunk arrived and plays at real time",
    "stall_ms": "total time such a player waited for late chunks",
    "underruns_no_prebuffer": "the same for a player that starts when the first chunk arrives "
    "(bench.loadgen's); underrun_at_s_no_prebuffer: when each happened, in seconds after the "
    "first chunk",
    "times_s": "*_s fields are seconds after the ramp started (the first context was due)",
    "admitted_running_at_refusal": "admitted streams between context.created and their last "
    "audio chunk at the moment each refusal arrived",
    "max_admitted_running": "the most admitted streams, counted the same way, at the moment one "
    "of them started (over the slot count fails the run)",
    "health": "GET /health samples: the engine's model slots in use, contexts and sessions",
}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Ramp the sessions; write the JSON (and PNG), print the summary, return the report."""
    machine = machine_info()
    out: Path = args.out or RESULTS_DIR / f"overload-{datetime.now():%Y%m%d-%H%M%S}.json"
    with _target(args) as (url, log_path):
        model, spec = spec_for_server(url, args)

        async def main_task() -> Overload:
            state = Overload(args, url, spec, args.slots)
            await state.run()
            return state

        state = asyncio.run(main_task())
        server_log = server_log_summary(log_path)
    origin = state.ramp_started
    per_session = [session_json(s, origin, args.prebuffer_ms) for s in state.sessions]
    health = dict(state.health)
    health["t_s"] = [round(t + state.origin - origin, 3) for t in health["t_s"]]
    report: dict[str, Any] = {
        "name": args.name or out.stem,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": {
            "url": url,
            "spawn": args.spawn,
            "slots": args.slots,
            "server_options": list(args.server_option),
            "model": dataclasses.asdict(model) if model is not None else None,
            "sessions": args.sessions,
            "interval_s": args.interval_s,
            "connect": args.connect,
            "words": args.words,
            "tokens_per_s": args.tokens_per_s,
            "voice": args.voice,
            "sample_rate": spec.sample_rate,
            "encoding": "pcm_s16le",
            "first_clause_words": FIRST_CLAUSE_WORDS,
            "texts": len(SENTENCES),
            "warmup": args.warmup,
            "timeout_s": args.timeout,
            "max_refusal_ms": args.max_refusal_ms,
            "prebuffer_ms": args.prebuffer_ms,
            "sample_s": args.sample_s,
        },
        "machine": {**machine, "load_average_1m_after": machine_info()["load_average_1m"]},
        "definitions": DEFINITIONS,
        "ramp_s": round(state.ramp_ended - origin, 3),
        "summary": summarize_run(
            per_session, health, args.slots, args.max_refusal_ms, args.prebuffer_ms
        ),
        "per_session": per_session,
        "health": health,
        "health_failures": state.health_failures,
        "warmup_errors": state.warmup_errors,
        "server_log": server_log,
    }
    write_json(report, out)
    print(format_summary(report))
    print(f"report: {out}")
    if not args.no_plot:
        plot = out.with_suffix(".png")
        write_overload_plot(report, plot)
        print(f"plot:   {plot}")
    return report


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.url is None and args.spawn is None:
        args.spawn = DEFAULT_SPAWN
    if args.server_option and not args.spawn:
        raise SystemExit("--server-option only applies with --spawn")
    if any(opt.split("=", 1)[0].strip() == "max_contexts" for opt in args.server_option):
        raise SystemExit("give the slot count with --slots, not --server-option max_contexts=")
    if args.spawn and args.slots is None:
        args.slots = DEFAULT_SLOTS
    if args.slots is not None and args.slots < 1:
        raise SystemExit("--slots must be at least 1")
    if args.sessions < 1 or args.words < 1:
        raise SystemExit("--sessions and --words must be at least 1")
    if min(args.interval_s, args.tokens_per_s, args.prebuffer_ms) < 0 or args.sample_s <= 0:
        raise SystemExit(
            "--interval-s, --tokens-per-s and --prebuffer-ms must be >= 0, --sample-s > 0"
        )
    try:
        report = run(args)
    except VoiceServerError as err:
        raise SystemExit(f"bench.overload: {err.code}: {err.message}") from None
    return 0 if report["summary"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
