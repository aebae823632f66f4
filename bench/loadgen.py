"""Load generator: concurrent streaming sessions against a voice server, measured at the client.

Run ``python -m bench.loadgen --help``; bench/README.md explains the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import multiprocessing
import multiprocessing.connection
import os
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm import tqdm
from voiceclient import VoiceClient, VoiceServerError

from bench.arrivals import ArrivalPlan, poisson_schedule, session_seconds
from bench.cli import (
    DEFAULT_URL,
    add_report_arguments,
    add_spawn_model_argument,
    add_speech_arguments,
    add_target_arguments,
)
from bench.measure import RequestResult
from bench.procstat import raise_open_files_limit
from bench.report import format_table, gpu_memory_mib, machine_info, write_json, write_plot
from bench.request import RequestSpec, failed_request, run_request, spec_for_server
from bench.spawn import spawn_server
from bench.stats import LevelResult, WorkerShare
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
    add_spawn_model_argument(parser)
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
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="client processes: each level's sessions are spread over N worker processes "
        "that take requests from one shared queue and start together (default 1: all in "
        "this process)",
    )
    parser.add_argument(
        "--arrivals",
        choices=("burst", "poisson"),
        default="burst",
        help="burst: each level's sessions start together and each starts its next request "
        "when one ends; poisson: requests arrive on their own (a Poisson process) at the rate "
        "that keeps about CONCURRENCY sessions active (CONCURRENCY / --session-s a second)",
    )
    parser.add_argument(
        "--session-s",
        type=float,
        default=None,
        help="poisson: how long a session lasts (first text -> its audio heard), for the "
        "rate (default: the warm-up requests' mean)",
    )
    parser.add_argument(
        "--arrival-seed", type=int, default=0, help="poisson: the schedule's seed (default 0)"
    )
    add_speech_arguments(
        parser, warmup_help="unmeasured requests before the first level", timeout_s=120.0
    )
    add_report_arguments(parser, "loadgen")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def requests_for(concurrency: int, requested: int | None, poisson: bool = False) -> int:
    """Requests of a level: as asked, else twice the sessions (burst) or three times the
    active target (poisson: enough for the arrivals to reach a steady state)."""
    if requested is not None:
        return requested
    return max(8, 3 * concurrency) if poisson else max(4, 2 * concurrency)


def sessions_for(concurrency: int, poisson: bool) -> int:
    """Client sessions of a level: one per concurrent request (burst); for open-loop
    arrivals, room for twice the active target, so arrivals are not held back."""
    return 2 * concurrency + 4 if poisson else concurrency


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` counts that differ by at most one, the larger first."""
    base, extra = divmod(total, parts)
    return [base + (1 if k < extra else 0) for k in range(parts)]


@dataclasses.dataclass(slots=True)
class SessionsRun:
    """What one process's sessions of a level did."""

    results: list[RequestResult]
    started_at: float
    ended_at: float


async def run_sessions(
    url: str,
    api_key: str | None,
    spec: RequestSpec,
    *,
    concurrency: int,
    sessions: int,
    next_index: Callable[[], int],
    requests: int,
    on_result: Callable[[RequestResult], None],
    ready: Callable[[], Awaitable[None]] | None = None,
    schedule: Sequence[float] | None = None,
) -> SessionsRun:
    """``sessions`` sessions (of the level's ``concurrency``) take request indices from
    ``next_index`` until it reaches ``requests``. ``ready`` is awaited once every session
    is connected, just before the clock starts. ``schedule``: request ``i`` starts no
    sooner than ``schedule[i]`` seconds after the clock starts (open-loop arrivals)."""
    clients = await asyncio.gather(*(VoiceClient.connect(url, api_key) for _ in range(sessions)))
    results: list[RequestResult] = []
    started = time.monotonic()

    async def worker(vc: VoiceClient) -> None:
        while (index := next_index()) < requests:
            if schedule is not None:
                await asyncio.sleep(max(0.0, started + schedule[index] - time.monotonic()))
            if vc.closed:
                try:
                    vc = await VoiceClient.connect(url, api_key)
                    clients.append(vc)
                except VoiceServerError as err:
                    result = failed_request(index, concurrency, f"{err.code}: {err.message}")
                    results.append(result)
                    on_result(result)
                    continue
            result = await run_request(vc, text_for(index), spec, index, concurrency)
            results.append(result)
            on_result(result)

    try:
        if ready is not None:
            await ready()
        started = time.monotonic()
        try:
            await asyncio.gather(*(worker(vc) for vc in clients))
        finally:
            ended = time.monotonic()
    finally:
        for vc in clients:
            await vc.close()
    return SessionsRun(results, started, ended)


async def run_level(
    url: str,
    api_key: str | None,
    spec: RequestSpec,
    concurrency: int,
    requests: int,
    progress: tqdm,
    plan: ArrivalPlan | None = None,
) -> LevelResult:
    """``concurrency`` sessions (more with open-loop arrivals, ``plan``) take requests
    from one counter until ``requests`` ran."""
    counter = itertools.count()
    sessions = sessions_for(concurrency, plan is not None)

    def on_result(result: RequestResult) -> None:
        if result.ttfa_ms is not None:
            progress.set_postfix_str(f"ttfa {result.ttfa_ms:.0f} ms", refresh=False)
        progress.update(1)

    run = await run_sessions(
        url,
        api_key,
        spec,
        concurrency=concurrency,
        sessions=sessions,
        next_index=lambda: next(counter),
        requests=requests,
        on_result=on_result,
        schedule=plan.schedule if plan is not None else None,
    )
    results = sorted(run.results, key=lambda r: r.index)
    worker = WorkerShare(os.getpid(), sessions, len(results))
    return _with_plan(
        LevelResult(concurrency, tuple(results), run.started_at, run.ended_at, (worker,)), plan
    )


def _with_plan(level: LevelResult, plan: ArrivalPlan | None) -> LevelResult:
    if plan is None:
        return level
    return dataclasses.replace(level, arrivals=plan.summary(level.results, level.started_at))


# --- several client processes ---------------------------------------------------------
#
# The parent starts N worker processes ('spawn' start method) once for the whole run. For
# each level it sends every worker with sessions a ("level", concurrency, sessions,
# requests) message; each connects its sessions and answers ("ready", pid); when all are
# ready the parent sets the shared start event, and each worker starts its clock and its
# sessions, which take request indices from one shared counter (the single queue of the
# one-process run); each answers ("done", pid, started, ended, [result dicts]). The level
# runs from the first start to the last end (time.monotonic() is system-wide on Linux and
# macOS, so the workers' times compare). A worker answers ("error", ...) instead of dying.

WORKER_START_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True, slots=True)
class _Shared:
    """What the parent and its workers share: the request counter (the level's one queue),
    the count of finished requests (for the progress bar), the start signal and the abort
    signal (set with the start signal when the parent gives up on a level)."""

    next_index: Any
    done: Any
    go: Any
    abort: Any

    def take(self) -> int:
        with self.next_index.get_lock():
            value = int(self.next_index.value)
            self.next_index.value = value + 1
        return value

    def finished(self, _: RequestResult) -> None:
        with self.done.get_lock():
            self.done.value += 1


class _Aborted(Exception):
    pass


def _worker_main(
    conn: multiprocessing.connection.Connection,
    url: str,
    api_key: str | None,
    spec: RequestSpec,
    shared: _Shared,
) -> None:
    """A client worker process: run the parent's levels until it says stop."""
    parent = os.getppid()

    def wait_for_go() -> None:
        while not shared.go.wait(0.5):
            if os.getppid() != parent:
                raise _Aborted
        if shared.abort.is_set():
            raise _Aborted

    async def ready() -> None:
        conn.send(("ready", os.getpid()))
        await asyncio.to_thread(wait_for_go)

    with contextlib.suppress(KeyboardInterrupt, _Aborted, EOFError, BrokenPipeError):
        conn.send(("hello", os.getpid()))
        while (message := conn.recv())[0] == "level":
            _, concurrency, sessions, requests, schedule = message
            try:
                run = asyncio.run(
                    run_sessions(
                        url,
                        api_key,
                        spec,
                        concurrency=concurrency,
                        sessions=sessions,
                        next_index=shared.take,
                        requests=requests,
                        on_result=shared.finished,
                        ready=ready,
                        schedule=schedule,
                    )
                )
            except VoiceServerError as err:
                conn.send(("error", err.code, err.message, traceback.format_exc()))
                continue
            except _Aborted:
                raise
            except Exception as exc:  # the parent reports it
                conn.send(("error", type(exc).__name__, str(exc), traceback.format_exc()))
                continue
            rows = [dataclasses.asdict(r) for r in run.results]
            conn.send(("done", os.getpid(), run.started_at, run.ended_at, rows))


@dataclasses.dataclass(slots=True)
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: multiprocessing.connection.Connection
    pid: int | None = None


class WorkerPool:
    """``processes`` client worker processes that run each level's sessions together."""

    def __init__(self, processes: int, url: str, api_key: str | None, spec: RequestSpec):
        ctx = multiprocessing.get_context("spawn")
        self._shared = _Shared(ctx.Value("q", 0), ctx.Value("q", 0), ctx.Event(), ctx.Event())
        self._workers: list[_Worker] = []
        try:
            for k in range(processes):
                parent_conn, child_conn = ctx.Pipe()
                process = ctx.Process(
                    target=_worker_main,
                    args=(child_conn, url, api_key, spec, self._shared),
                    name=f"bench.loadgen-worker-{k}",
                    daemon=True,
                )
                process.start()
                child_conn.close()
                self._workers.append(_Worker(process, parent_conn))
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        # Workers waiting for a start that will not come give up; idle ones stop.
        self._shared.abort.set()
        self._shared.go.set()
        for worker in self._workers:
            with contextlib.suppress(OSError, ValueError):
                worker.conn.send(("stop",))
        for worker in self._workers:
            worker.process.join(timeout=10)
            if worker.process.is_alive():
                worker.process.terminate()
                worker.process.join(timeout=5)
            worker.conn.close()
        self._workers = []

    def _recv(self, worker: _Worker, expect: str, timeout_s: float | None = None) -> tuple:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not worker.conn.poll(0.5):
            if not worker.process.is_alive():
                raise RuntimeError(
                    f"{worker.process.name} exited with {worker.process.exitcode} "
                    f"while the parent waited for '{expect}'"
                )
            if deadline is not None and time.monotonic() > deadline:
                raise RuntimeError(f"{worker.process.name}: no '{expect}' in {timeout_s:g} s")
        try:
            message = worker.conn.recv()
        except EOFError:
            raise RuntimeError(f"{worker.process.name} closed its pipe") from None
        if message[0] == "error":
            _, code, text, trace = message
            print(f"{worker.process.name} failed:\n{trace}", file=sys.stderr)
            raise VoiceServerError(code, text)
        if message[0] != expect:
            raise RuntimeError(f"{worker.process.name}: '{message[0]}', expected '{expect}'")
        return message

    def start(self) -> None:
        """Wait until every worker has started (imported everything and answered)."""
        for worker in self._workers:
            if worker.pid is None:
                _, worker.pid = self._recv(worker, "hello", WORKER_START_TIMEOUT_S)

    def run_level(
        self, concurrency: int, requests: int, progress: tqdm, plan: ArrivalPlan | None = None
    ) -> LevelResult:
        """The level's sessions split evenly over the workers, one request queue."""
        self.start()
        shares = split_evenly(sessions_for(concurrency, plan is not None), len(self._workers))
        active = [(w, n) for w, n in zip(self._workers, shares, strict=True) if n > 0]
        shared = self._shared
        shared.go.clear()
        with shared.next_index.get_lock():
            shared.next_index.value = 0
        with shared.done.get_lock():
            shared.done.value = 0
        for worker, sessions in active:
            schedule = list(plan.schedule) if plan is not None else None
            worker.conn.send(("level", concurrency, sessions, requests, schedule))
        for worker, _ in active:
            self._recv(worker, "ready")
        shared.go.set()
        runs: dict[int, tuple[float, float, list[RequestResult]]] = {}
        pending = {worker.conn: worker for worker, _ in active}
        while pending:
            readable = multiprocessing.connection.wait(list(pending), timeout=0.2)
            progress.update(int(shared.done.value) - progress.n)
            for conn in readable:
                worker = pending.pop(conn)
                _, pid, started, ended, rows = self._recv(worker, "done")
                runs[pid] = (started, ended, [RequestResult(**row) for row in rows])
            for worker in pending.values():
                if not worker.process.is_alive() and not worker.conn.poll():
                    raise RuntimeError(
                        f"{worker.process.name} exited with {worker.process.exitcode}"
                    )
        progress.update(int(shared.done.value) - progress.n)
        results = sorted((r for _, _, rs in runs.values() for r in rs), key=lambda r: r.index)
        shares_by_pid = {worker.pid: sessions for worker, sessions in active}
        workers = tuple(
            WorkerShare(pid, shares_by_pid[pid], len(rs)) for pid, (_, _, rs) in runs.items()
        )
        level = LevelResult(
            concurrency,
            tuple(results),
            min(started for started, _, _ in runs.values()),
            max(ended for _, ended, _ in runs.values()),
            workers,
        )
        return _with_plan(level, plan)


async def _warmup(
    url: str, api_key: str | None, spec: RequestSpec, count: int
) -> list[RequestResult]:
    async with VoiceClient.connect(url, api_key) as vc:
        return [await run_request(vc, text_for(i), spec) for i in range(count)]


def run_all(
    url: str, api_key: str | None, spec: RequestSpec, args: argparse.Namespace
) -> list[LevelResult]:
    with contextlib.ExitStack() as stack:
        pool = None
        if args.processes > 1:
            # Started first: the workers import while the warm-up runs.
            pool = stack.enter_context(WorkerPool(args.processes, url, api_key, spec))
        warm = asyncio.run(_warmup(url, api_key, spec, args.warmup)) if args.warmup > 0 else []
        poisson = args.arrivals == "poisson"
        session_s = args.session_s or session_seconds(warm)
        if poisson and not session_s:
            raise SystemExit("--arrivals poisson needs --session-s or a warm-up request")
        levels = []
        for concurrency in args.concurrency:
            requests = requests_for(concurrency, args.requests_per_level, poisson)
            plan = None
            if poisson:
                assert session_s is not None
                rate = concurrency / session_s
                schedule = poisson_schedule(rate, requests, args.arrival_seed + concurrency)
                plan = ArrivalPlan(rate, session_s, tuple(schedule))
            with tqdm(
                total=requests, desc=f"concurrency {concurrency:>3}", unit="req", disable=args.quiet
            ) as progress:
                if pool is not None:
                    level = pool.run_level(concurrency, requests, progress, plan)
                else:
                    level = asyncio.run(
                        run_level(url, api_key, spec, concurrency, requests, progress, plan)
                    )
            memory = gpu_memory_mib()
            if memory is not None:
                level = dataclasses.replace(
                    level, gpu_memory_used_mib=memory[0], gpu_memory_total_mib=memory[1]
                )
            levels.append(level)
    return levels


@contextlib.contextmanager
def _target(args: argparse.Namespace) -> Iterator[str]:
    if args.spawn or args.spawn_model:
        what = (f" --config {args.spawn}" if args.spawn else "") + (
            f" --model {args.spawn_model}" if args.spawn_model else ""
        )
        print(f"starting voiceserver serve{what} ...", file=sys.stderr)
        with spawn_server(
            args.spawn,
            model=args.spawn_model,
            options=tuple(args.server_option),
            args=tuple(f"--engine={e}" for e in args.server_engine)
            + (() if args.server_engines is None else ("--engines", str(args.server_engines))),
            load_generator=True,
        ) as server:
            yield server.url
    else:
        yield args.url


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run every level; write the JSON (and PNG) and return the report."""
    machine = machine_info()
    out: Path = args.out or RESULTS_DIR / f"loadgen-{datetime.now():%Y%m%d-%H%M%S}.json"
    # Every session is a socket here and in the server (which inherits the limit).
    files = raise_open_files_limit()
    most = sessions_for(max(args.concurrency), args.arrivals == "poisson")
    per_process = -(-most // args.processes)
    if files < per_process + 64:
        print(
            f"warning: RLIMIT_NOFILE is {files}, {per_process} sessions per client process "
            "may not fit",
            file=sys.stderr,
        )
    with _target(args) as url:
        model, spec = spec_for_server(url, args)
        origin = time.monotonic()
        levels = run_all(url, args.api_key, spec, args)
    report: dict[str, Any] = {
        "name": args.name or out.stem,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": {
            "url": url,
            "spawn": args.spawn,
            "spawn_model": str(args.spawn_model) if args.spawn_model else None,
            "server_options": list(args.server_option),
            "server_engine": list(args.server_engine),
            "server_engines": args.server_engines,
            "processes": args.processes,
            "model": dataclasses.asdict(model) if model is not None else None,
            "concurrency": list(args.concurrency),
            "requests_per_level": [
                requests_for(c, args.requests_per_level, args.arrivals == "poisson")
                for c in args.concurrency
            ],
            "arrivals": args.arrivals,
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
            "wall_s": "first session's start -> last session's end, over all client processes",
            "gpu_memory_used_mib": "nvidia-smi memory.used after the level (null without it)",
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
    if args.server_option and not (args.spawn or args.spawn_model):
        raise SystemExit("--server-option only applies with --spawn or --spawn-model")
    if args.spawn_model is not None:
        if args.url != DEFAULT_URL:
            raise SystemExit("--spawn-model starts a server: it does not go with --url")
        if not args.spawn_model.exists():
            raise SystemExit(f"--spawn-model: {args.spawn_model} does not exist")
    if min(args.concurrency) < 1:
        raise SystemExit("--concurrency values must be at least 1")
    if args.processes < 1:
        raise SystemExit("--processes must be at least 1")
    if args.arrivals == "poisson" and args.session_s is None and args.warmup < 1:
        raise SystemExit("--arrivals poisson needs --session-s or a warm-up request")
    if args.session_s is not None and args.session_s <= 0:
        raise SystemExit("--session-s must be positive")
    try:
        return run(args)
    except VoiceServerError as err:
        raise SystemExit(f"bench.loadgen: {err.code}: {err.message}") from None


if __name__ == "__main__":
    main()
