"""Soak: many idle WebSocket sessions plus a few live streams, held for minutes, sampled
once a second (server memory and open files, sockets still connected, time to first
audio, errors, unexpected closes).

Run ``python -m bench.soak --help``; bench/README.md explains the report.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from voiceclient import VoiceClient, VoiceServerError
from voiceclient.errors import VoiceConnectionError
from voiceclient.server_info import get_json, http_base

from bench.cli import add_report_arguments, add_speech_arguments, add_target_arguments
from bench.loadgen import RESULTS_DIR
from bench.measure import RequestResult
from bench.procstat import ProcSample, open_files_limit, raise_open_files_limit, read_proc
from bench.report import machine_info, server_log_summary, write_json
from bench.request import RequestSpec, failed_request, run_request, spec_for_server
from bench.soak_report import (
    fit_line,
    format_summary,
    per_minute,
    slope_per_minute,
    ttfa_summary,
    write_soak_plot,
)
from bench.spawn import spawn_server
from bench.stats import summarize
from bench.texts import FIRST_CLAUSE_WORDS, SENTENCES, text_for

# Descriptors a process needs besides the sockets: libraries, model files, logs, pipes.
FD_HEADROOM = 256
HEALTH_TIMEOUT_S = 5.0
FAILURE_BACKOFF_S = 1.0
SAY_FIRST = 5


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak",
        description=(
            "Hold N idle WebSocket sessions (with keepalives) and M sessions that speak "
            "sentence after sentence for a long time; sample the server's memory, open "
            "files and connected sockets once a second and measure time to first audio. "
            "Exits 1 when the server died, an idle socket was dropped or a request failed."
        ),
    )
    add_target_arguments(parser, "soak")
    parser.add_argument(
        "--server-pid",
        type=int,
        default=None,
        help="with --url: the server's process id, to sample its memory and open files",
    )
    parser.add_argument("--idle", type=int, default=1000, help="idle sessions (default 1000)")
    parser.add_argument(
        "--active", type=int, default=4, help="sessions that keep speaking (default 4)"
    )
    parser.add_argument(
        "--duration-s",
        type=float,
        default=600.0,
        help="seconds of load once the idle sessions are connected (default 600)",
    )
    parser.add_argument(
        "--keepalive-s",
        type=float,
        default=45.0,
        help="seconds between keepalives on each idle session (default 45; the server "
        "closes a silent session after 300)",
    )
    parser.add_argument(
        "--connect-batch",
        type=int,
        default=50,
        help="idle sessions opened concurrently, batch after batch (default 50)",
    )
    parser.add_argument(
        "--pause-s", type=float, default=0.0, help="pause between an active session's requests"
    )
    add_speech_arguments(
        parser, warmup_help="unmeasured requests before the idle sessions open", timeout_s=60.0
    )
    parser.add_argument(
        "--sample-s", type=float, default=1.0, help="seconds between samples (default 1)"
    )
    add_report_arguments(parser, "soak")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


SERIES_KEYS = (
    "t_s",
    "rss_mb",
    "anon_mb",
    "fds",
    "threads",
    "cpu_pct",
    "idle_connected",
    "idle_dropped",
    "requests",
    "errors",
    "active_closes",
    "health_ms",
    "server_sessions",
    "bench_rss_mb",
    "bench_loop_lag_ms",
)


@dataclasses.dataclass(slots=True)
class IdleSocket:
    index: int
    client: VoiceClient
    connect_ms: float
    keepalives: int = 0
    dropped_at: float | None = None
    close_code: int | None = None
    reason: str = ""


def _close_info(err: VoiceServerError | None) -> tuple[int | None, str]:
    """The close code and message of a lost connection."""
    if isinstance(err, VoiceConnectionError):
        return err.close_code, err.message
    if err is not None:
        return None, f"{err.code}: {err.message}"
    return None, "closed"


async def _lost_error(client: VoiceClient) -> VoiceServerError | None:
    """A closed client re-raises the error that closed it on any send: a keepalive reads
    back the close code without reaching into the client."""
    try:
        await client.keepalive()
    except VoiceServerError as err:
        return err
    return None


def _code_key(code: int | None) -> str:
    return str(code) if code is not None else "none"


class Soak:
    """One run's state, shared by its tasks. Times are ``time.monotonic()`` seconds."""

    def __init__(
        self,
        args: argparse.Namespace,
        url: str,
        spec: RequestSpec,
        pid: int | None,
        process: subprocess.Popen[bytes] | None,
    ) -> None:
        self.args = args
        self.url = url
        self.spec = spec
        self.pid = pid
        self.process = process
        self.origin = time.monotonic()
        self.phases: dict[str, float] = {}
        self.proc_at: dict[str, ProcSample | None] = {}
        self.idle: list[IdleSocket] = []
        self.connect_errors: Counter[str] = Counter()
        self.connect_error_examples: list[str] = []
        self.results: list[RequestResult] = []
        self.active_closes: Counter[str] = Counter()
        self.series: dict[str, list[Any]] = {key: [] for key in SERIES_KEYS}
        self.health_ms: list[float] = []
        self.health_failures = 0
        self._probe: asyncio.Task[tuple[float, int | None]] | None = None
        self.server_died_at: float | None = None
        self.server_exit_code: int | None = None
        self.stop = asyncio.Event()
        self.steady_end = float("inf")
        self._keepalive_tasks: list[asyncio.Task[None]] = []
        self._last_cpu: tuple[float, float] | None = None
        self._said: Counter[str] = Counter()
        self.warmup_errors: list[str] = []

    def mark(self, phase: str) -> None:
        self.phases[phase] = time.monotonic()
        if self.pid is not None:
            self.proc_at[phase] = read_proc(self.pid)

    def say(self, line: str) -> None:
        if not self.args.quiet:
            print(f"[{time.monotonic() - self.origin:7.1f} s] {line}", file=sys.stderr, flush=True)

    def say_some(self, kind: str, line: str) -> None:
        """``say`` the first few events of a kind, then every hundredth, so that a server
        that fails every request does not bury the progress lines."""
        self._said[kind] += 1
        n = self._said[kind]
        if n <= SAY_FIRST or n % 100 == 0:
            self.say(line if n <= SAY_FIRST else f"{line} ({n} so far)")

    # -- idle sessions --------------------------------------------------------------

    async def open_idle(self) -> None:
        n, batch = self.args.idle, max(1, self.args.connect_batch)
        for start in range(0, n, batch):
            if self.stop.is_set():
                return
            await asyncio.gather(*(self._open_one(i) for i in range(start, min(n, start + batch))))

    async def _open_one(self, index: int) -> None:
        started = time.monotonic()
        try:
            client = await VoiceClient.connect(self.url, self.args.api_key, open_timeout=30.0)
        except VoiceServerError as err:
            self.connect_errors[err.code] += 1
            if len(self.connect_error_examples) < 5:
                self.connect_error_examples.append(f"{err.code}: {err.message}")
            return
        sock = IdleSocket(index, client, (time.monotonic() - started) * 1000.0)
        self.idle.append(sock)
        self._keepalive_tasks.append(asyncio.create_task(self._keepalive(sock)))

    async def _keepalive(self, sock: IdleSocket) -> None:
        interval = self.args.keepalive_s
        # Spread the sends over the interval instead of a burst from every socket at once.
        await asyncio.sleep(interval * sock.index / max(1, self.args.idle))
        while sock.dropped_at is None:
            try:
                await sock.client.keepalive()
            except VoiceServerError as err:
                self._drop(sock, err)
                return
            sock.keepalives += 1
            await asyncio.sleep(interval)

    def _drop(self, sock: IdleSocket, err: VoiceServerError | None) -> None:
        if sock.dropped_at is not None:
            return
        sock.dropped_at = time.monotonic()
        sock.close_code, sock.reason = _close_info(err)
        self.say_some("drop", f"idle socket {sock.index} dropped: {sock.close_code} {sock.reason}")

    async def check_idle(self) -> None:
        for sock in self.idle:
            if sock.dropped_at is None and sock.client.closed:
                self._drop(sock, await _lost_error(sock.client))

    async def close_idle(self) -> None:
        for task in self._keepalive_tasks:
            task.cancel()
        await asyncio.gather(*self._keepalive_tasks, return_exceptions=True)
        batch = max(1, self.args.connect_batch) * 4
        for start in range(0, len(self.idle), batch):
            await asyncio.gather(
                *(sock.client.close() for sock in self.idle[start : start + batch]),
                return_exceptions=True,
            )

    # -- active sessions ------------------------------------------------------------

    def ending(self) -> bool:
        return self.stop.is_set() or time.monotonic() >= self.steady_end

    async def active(self, counter: Iterator[int]) -> None:
        client: VoiceClient | None = None
        try:
            while not self.ending():
                if client is None or client.closed:
                    if client is not None:
                        await self._active_lost(client)
                    try:
                        client = await VoiceClient.connect(self.url, self.args.api_key)
                    except VoiceServerError as err:
                        client = None
                        self.results.append(
                            failed_request(
                                next(counter), self.args.active, f"{err.code}: {err.message}"
                            )
                        )
                        await self._pause(FAILURE_BACKOFF_S)
                        continue
                index = next(counter)
                result = await run_request(
                    client, text_for(index), self.spec, index, self.args.active
                )
                self.results.append(result)
                if not result.ok:
                    self.say_some("failed", f"request {index} failed: {result.error or 'no audio'}")
                    # A server failing every request at once would otherwise be hammered
                    # in a tight loop, and the error count would measure only that loop.
                    await self._pause(max(self.args.pause_s, FAILURE_BACKOFF_S))
                elif self.args.pause_s > 0:
                    await self._pause(self.args.pause_s)
        finally:
            if client is not None:
                if client.closed:
                    await self._active_lost(client)
                await client.close()

    async def _active_lost(self, client: VoiceClient) -> None:
        code, reason = _close_info(await _lost_error(client))
        self.active_closes[_code_key(code)] += 1
        self.say_some("lost", f"active session lost: {code} {reason}")

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)

    # -- sampling -------------------------------------------------------------------

    async def _probe_health(self) -> tuple[float, int | None]:
        started = time.monotonic()
        body = await asyncio.to_thread(
            get_json, f"{http_base(self.url)}/health", self.args.api_key, HEALTH_TIMEOUT_S
        )
        sessions = body.get("sessions") if isinstance(body, dict) else None
        return (time.monotonic() - started) * 1000.0, sessions

    async def _health(self) -> tuple[float | None, int | None]:
        """Start a /health probe unless one is still out and wait for it briefly; a slower
        answer is counted, with its whole round trip, by a later sample."""
        if self._probe is None:
            self._probe = asyncio.create_task(self._probe_health())
        await asyncio.wait({self._probe}, timeout=self.args.sample_s / 2)
        if not self._probe.done():
            return None, None
        probe, self._probe = self._probe, None
        try:
            ms, sessions = probe.result()
        except (OSError, ValueError, AttributeError):
            self.health_failures += 1
            return None, None
        self.health_ms.append(ms)
        return ms, sessions

    async def sampler(self) -> None:
        for tick in itertools.count():
            due = self.origin + tick * self.args.sample_s
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            await self.sample((time.monotonic() - due) * 1000.0)
            if self.stop.is_set():
                return

    async def sample(self, lag_ms: float) -> None:
        now = time.monotonic()
        await self.check_idle()
        proc = read_proc(self.pid) if self.pid is not None else None
        self._check_server(proc, now)
        cpu_pct = None
        if proc is not None:
            if self._last_cpu is not None and now > self._last_cpu[0]:
                cpu_pct = 100.0 * (proc.cpu_s - self._last_cpu[1]) / (now - self._last_cpu[0])
            self._last_cpu = (now, proc.cpu_s)
        health_ms, sessions = await self._health()
        own = read_proc(os.getpid())
        dropped = sum(1 for s in self.idle if s.dropped_at is not None)
        row = {
            "t_s": round(now - self.origin, 3),
            "rss_mb": round(proc.rss_mb, 2) if proc else None,
            "anon_mb": round(proc.anon_mb, 2) if proc else None,
            "fds": proc.fds if proc else None,
            "threads": proc.threads if proc else None,
            "cpu_pct": round(cpu_pct, 1) if cpu_pct is not None else None,
            "idle_connected": len(self.idle) - dropped,
            "idle_dropped": dropped,
            "requests": len(self.results),
            "errors": sum(1 for r in self.results if not r.ok),
            "active_closes": sum(self.active_closes.values()),
            "health_ms": round(health_ms, 3) if health_ms is not None else None,
            "server_sessions": sessions,
            "bench_rss_mb": round(own.rss_mb, 2) if own else None,
            "bench_loop_lag_ms": round(lag_ms, 3),
        }
        for key, value in row.items():
            self.series[key].append(value)
        steady = self.phases.get("steady_started")
        if steady is not None and now < self.steady_end:
            elapsed = now - steady
            if elapsed >= 60 and int(elapsed) % 60 < self.args.sample_s:
                ok = [r.ttfa_ms for r in self.results if r.ok and r.ttfa_ms is not None]
                p50 = summarize(ok[-200:])["p50"]
                memory = f"RSS {proc.rss_mb:.0f} MB, {proc.fds} fds, " if proc else ""
                self.say(
                    f"{memory}{row['idle_connected']}/{self.args.idle} idle connected, "
                    f"{row['requests']} requests ({row['errors']} failed), recent TTFA p50 "
                    f"{'-' if p50 is None else f'{p50:.0f}'} ms"
                )

    def _check_server(self, proc: ProcSample | None, now: float) -> None:
        if self.server_died_at is not None:
            return
        if self.process is not None:
            code = self.process.poll()
            if code is None:
                return
            self.server_exit_code = code
        elif self.pid is None or proc is not None:
            return
        self.server_died_at = now
        self.say(f"the server died (exit code {self.server_exit_code})")
        self.stop.set()


async def soak(soak: Soak) -> None:
    args = soak.args
    sampler = asyncio.create_task(soak.sampler())
    try:
        if args.warmup > 0:
            soak.mark("warmup_started")
            async with VoiceClient.connect(soak.url, args.api_key) as client:
                for i in range(args.warmup):
                    result = await run_request(client, text_for(i), soak.spec)
                    if not result.ok:
                        soak.warmup_errors.append(result.error or "no_audio")
                        soak.say(f"warmup request failed: {result.error or 'no audio'}")
                        if client.closed:
                            break
        soak.mark("connect_started")
        soak.say(f"opening {args.idle} idle sessions, {args.connect_batch} at a time")
        await soak.open_idle()
        soak.mark("steady_started")
        soak.steady_end = soak.phases["steady_started"] + args.duration_s
        soak.say(
            f"{len(soak.idle)}/{args.idle} idle sessions open in "
            f"{soak.phases['steady_started'] - soak.phases['connect_started']:.1f} s; "
            f"{args.active} active sessions for {args.duration_s:g} s"
        )
        counter = itertools.count()
        workers = [asyncio.create_task(soak.active(counter)) for _ in range(args.active)]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(soak.stop.wait(), args.duration_s)
        await asyncio.gather(*workers)
        soak.mark("steady_ended")
        await soak.check_idle()
    finally:
        soak.stop.set()
        await sampler
        await soak.close_idle()
        soak.mark("ended")


@contextlib.contextmanager
def _target(
    args: argparse.Namespace,
) -> Iterator[tuple[str, subprocess.Popen[bytes] | None, Path | None]]:
    if not args.spawn:
        yield args.url, None, None
        return
    print(f"starting voiceserver serve --config {args.spawn} ...", file=sys.stderr)
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(
                spawn_server(args.spawn, options=tuple(args.server_option), load_generator=True)
            )
        except RuntimeError as exc:
            raise SystemExit(f"bench.soak: {exc}") from None
        yield server.url, server.process, server.log_path


def check_open_files(args: argparse.Namespace) -> int:
    """Raise our file limit to the hard limit (a spawned server inherits it); exit with a
    message when the sockets cannot fit."""
    needed = args.idle + 2 * args.active + FD_HEADROOM
    limit = raise_open_files_limit()
    if limit < needed:
        raise SystemExit(
            f"bench.soak: --idle {args.idle} --active {args.active} needs about {needed} open "
            f"files in this process (and as many in the server), but RLIMIT_NOFILE allows "
            f"{limit} even after raising the soft limit to the hard one. Raise the hard "
            f"limit (`ulimit -Hn` as root, LimitNOFILE= under systemd) or lower --idle."
        )
    return limit


def _at(series: dict[str, list[Any]], key: str, t_s: float | None) -> Any:
    """The first non-None sample of ``key`` at or after ``t_s``."""
    if t_s is None:
        return None
    for t, v in zip(series["t_s"], series[key], strict=True):
        if t >= t_s and v is not None:
            return v
    return None


def _proc_value(soak: Soak, phase: str, key: str) -> float | None:
    sample = soak.proc_at.get(phase)
    value = getattr(sample, key) if sample is not None else None
    return round(value, 2) if isinstance(value, float) else value


def summarize_run(soak: Soak) -> dict[str, Any]:
    args, series, phases = soak.args, soak.series, soak.phases
    rel = {k: v - soak.origin for k, v in phases.items()}
    steady_start = rel.get("steady_started")
    steady_end = rel.get("steady_ended", rel.get("ended"))
    in_steady = [
        i
        for i, t in enumerate(series["t_s"])
        if steady_start is not None and steady_end is not None and steady_start <= t <= steady_end
    ]

    def steady_max(key: str) -> float | None:
        """Over the samples of the steady phase and the readings at its two ends."""
        values = [series[key][i] for i in in_steady if series[key][i] is not None]
        values += [
            v
            for phase in ("steady_started", "steady_ended")
            if (v := _proc_value(soak, phase, key)) is not None
        ]
        return max(values) if values else None

    rss_start = _proc_value(soak, "steady_started", "rss_mb")
    rss_before = _proc_value(soak, "connect_started", "rss_mb")
    slope = anon_slope = fit = None
    if steady_start is not None and steady_end is not None:
        half = steady_start + (steady_end - steady_start) / 2
        slope = slope_per_minute(series["t_s"], series["rss_mb"], half, steady_end)
        anon_slope = slope_per_minute(series["t_s"], series["anon_mb"], half, steady_end)
        fit = fit_line(series["t_s"], series["rss_mb"], half, steady_end, slope)

    connected = len(soak.idle)
    dropped = [s for s in soak.idle if s.dropped_at is not None]
    results = soak.results
    ok = [r for r in results if r.ok]
    errors = [r.error or "no_audio" for r in results if not r.ok]
    ttfa = [r.ttfa_ms for r in ok if r.ttfa_ms is not None]
    steady_wall = (steady_end - steady_start) if steady_start is not None and steady_end else 0.0
    audio_total = sum(r.audio_s for r in results)
    died = soak.server_died_at is not None

    failures = []
    if died:
        failures.append(f"the server died (exit code {soak.server_exit_code})")
    if connected < args.idle:
        failures.append(f"{args.idle - connected} idle sessions could not connect")
    if dropped:
        failures.append(f"{len(dropped)} idle sessions dropped")
    if errors:
        failures.append(f"{len(errors)} active requests failed")
    if args.active > 0 and not ok:
        failures.append("no active request succeeded")

    return {
        "passed": not failures,
        "failures": failures,
        "server": {
            "pid": soak.pid,
            "died": died,
            "exit_code": soak.server_exit_code,
            "died_at_s": soak.server_died_at - soak.origin if died else None,
        },
        "idle": {
            "requested": args.idle,
            "connected": connected,
            "connect_failures": sum(soak.connect_errors.values()),
            "connect_errors": dict(soak.connect_errors),
            "connect_error_examples": soak.connect_error_examples,
            "connect_ms": summarize([s.connect_ms for s in soak.idle]),
            "dropped": len(dropped),
            "close_codes": dict(Counter(_code_key(s.close_code) for s in dropped)),
            "connected_at_end": connected - len(dropped),
            "keepalives_sent": sum(s.keepalives for s in soak.idle),
            "session_errors": sum(len(s.client.session_errors) for s in soak.idle),
            "warnings": sum(len(s.client.warnings) for s in soak.idle),
        },
        "active": {
            "sessions": args.active,
            "requests": len(results),
            "ok": len(ok),
            "errors": len(errors),
            "error_codes": dict(Counter(e.split(":", 1)[0] for e in errors)),
            "error_examples": list(dict.fromkeys(errors))[:5],
            "close_codes": dict(soak.active_closes),
            "ttfa_ms": ttfa_summary(ttfa),
            "rtf": summarize([r.rtf for r in ok if r.rtf is not None]),
            "underruns_total": sum(r.underruns for r in ok),
            "requests_with_underruns": sum(1 for r in ok if r.underruns),
            "audio_s_total": audio_total,
            "x_real_time": audio_total / steady_wall if steady_wall > 0 else 0.0,
        },
        "warmup_errors": soak.warmup_errors,
        "ttfa_per_minute": per_minute(results, phases.get("steady_started", soak.origin)),
        "rss_mb": {
            "before_idle": rss_before,
            "start": rss_start,
            "max": steady_max("rss_mb"),
            "end": _proc_value(soak, "steady_ended", "rss_mb"),
            "slope_mb_per_min": slope,
            "fit": fit,
            "per_idle_socket_kb": (rss_start - rss_before) * 1024.0 / connected
            if rss_start is not None and rss_before is not None and connected
            else None,
        },
        "anon_mb": {
            "start": _proc_value(soak, "steady_started", "anon_mb"),
            "end": _proc_value(soak, "steady_ended", "anon_mb"),
            "slope_mb_per_min": anon_slope,
        },
        "fds": {
            "before_idle": _proc_value(soak, "connect_started", "fds"),
            "start": _proc_value(soak, "steady_started", "fds"),
            "max": steady_max("fds"),
            "end": _proc_value(soak, "steady_ended", "fds"),
        },
        "server_cpu_pct": summarize(
            [series["cpu_pct"][i] for i in in_steady if series["cpu_pct"][i] is not None]
        ),
        "health_ms": summarize(soak.health_ms),
        "health_failures": soak.health_failures,
        "bench_loop_lag_ms": summarize(series["bench_loop_lag_ms"]),
        "bench_rss_mb_end": _at(series, "bench_rss_mb", steady_end),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the soak; write the JSON (and PNG), print the summary, return the report."""
    nofile = check_open_files(args)
    machine = machine_info()
    out: Path = args.out or RESULTS_DIR / f"soak-{datetime.now():%Y%m%d-%H%M%S}.json"
    with _target(args) as (url, process, log_path):
        pid = process.pid if process is not None else args.server_pid
        server_nofile = open_files_limit(pid) if pid is not None else None
        if server_nofile is not None and server_nofile < args.idle + 2 * args.active:
            raise SystemExit(
                f"bench.soak: the server (pid {pid}) may open only {server_nofile} files, "
                f"fewer than --idle {args.idle} sockets"
            )
        model, spec = spec_for_server(url, args)

        async def main_task() -> Soak:
            state = Soak(args, url, spec, pid, process)
            await soak(state)
            return state

        state = asyncio.run(main_task())
        server_log = server_log_summary(log_path)
    rel = {k: round(v - state.origin, 3) for k, v in state.phases.items()}
    report: dict[str, Any] = {
        "name": args.name or out.stem,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": {
            "url": url,
            "spawn": args.spawn,
            "server_options": list(args.server_option),
            "server_pid": pid,
            "model": dataclasses.asdict(model) if model is not None else None,
            "idle": args.idle,
            "active": args.active,
            "duration_s": args.duration_s,
            "keepalive_s": args.keepalive_s,
            "connect_batch": args.connect_batch,
            "tokens_per_s": args.tokens_per_s,
            "pause_s": args.pause_s,
            "voice": args.voice,
            "sample_rate": spec.sample_rate,
            "encoding": "pcm_s16le",
            "first_clause_words": FIRST_CLAUSE_WORDS,
            "texts": len(SENTENCES),
            "warmup": args.warmup,
            "timeout_s": args.timeout,
            "sample_s": args.sample_s,
            "open_files_limit": nofile,
            "server_open_files_limit": server_nofile,
        },
        "machine": {**machine, "load_average_1m_after": machine_info()["load_average_1m"]},
        "definitions": DEFINITIONS,
        "phases": {
            **{f"{k}_s": v for k, v in rel.items()},
            "connect_s": rel.get("steady_started", 0.0) - rel.get("connect_started", 0.0),
            "steady_s": rel.get("steady_ended", rel.get("ended", 0.0))
            - rel.get("steady_started", 0.0),
        },
        "summary": summarize_run(state),
        "series": state.series,
        "drops": [
            {
                "index": s.index,
                "at_s": round(s.dropped_at - state.origin, 3),
                "close_code": s.close_code,
                "reason": s.reason,
            }
            for s in state.idle
            if s.dropped_at is not None
        ],
        "per_request": [r.to_json(state.origin) for r in state.results],
        "server_log": server_log,
    }
    write_json(report, out)
    print(format_summary(report))
    print(f"report: {out}")
    if not args.no_plot:
        plot = out.with_suffix(".png")
        write_soak_plot(report, plot)
        print(f"plot:   {plot}")
    return report


DEFINITIONS = {
    "steady": "from the moment every idle session is open to --duration-s later (plus the "
    "active requests still in flight then)",
    "ttfa_ms": "flush of the first clause sent -> first audio chunk received",
    "rss_mb": "the server's VmRSS from /proc; start/end at the steady phase's ends, max over it",
    "slope_mb_per_min": "least-squares slope of the samples over the second half of the steady "
    "phase",
    "per_idle_socket_kb": "(RSS at steady start - RSS before the idle sessions opened) / idle "
    "sessions connected",
    "idle_dropped": "idle sessions the server closed (or that broke) before the end",
    "health_ms": "GET /health round trips, one at a time, started at each sample",
    "bench_loop_lag_ms": "how late the bench's own sampler woke; high values mean the bench, "
    "not the server, is short of CPU and its TTFA numbers are inflated",
    "series": "one entry per sample; requests, errors, idle_dropped and active_closes are "
    "running totals",
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.server_option and not args.spawn:
        raise SystemExit("--server-option only applies with --spawn")
    if args.server_pid is not None and args.spawn:
        raise SystemExit("--server-pid only applies with --url")
    if args.idle < 0 or args.active < 0 or args.duration_s <= 0 or args.sample_s <= 0:
        raise SystemExit("--idle and --active must be >= 0, --duration-s and --sample-s > 0")
    if args.keepalive_s <= 0:
        raise SystemExit("--keepalive-s must be positive")
    try:
        report = run(args)
    except VoiceServerError as err:
        raise SystemExit(f"bench.soak: {err.code}: {err.message}") from None
    return 0 if report["summary"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
