"""A fuzz run: the idle reference, barrages (every fuzz session at once, with the
bystander alongside), each new finding replayed on a fresh session and cut down to the
smallest message sequence that still shows it, and the checks after the barrages."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import Callable, Iterable, Sequence

import websockets
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from bench.flood import KINDS as FLOODS
from bench.fuzzing.bystander import compare, speak
from bench.fuzzing.compat_conn import CompatConn
from bench.fuzzing.config import FuzzConfig
from bench.fuzzing.conn import Conn
from bench.fuzzing.facts import ServerFacts
from bench.fuzzing.flooder import flood_during
from bench.fuzzing.http_front import FrontProbe, front_scripts
from bench.fuzzing.http_wire import play_front
from bench.fuzzing.liveness import fresh_compat, fresh_native, health
from bench.fuzzing.messages import ProbeSpec, Step
from bench.fuzzing.native_conn import NativeConn
from bench.fuzzing.plans import Plan, plans
from bench.fuzzing.report import Finding, FuzzReport
from bench.fuzzing.spin import spin_check

CONNS: dict[str, type[Conn]] = {"ws": NativeConn, "stream": CompatConn}
"""The connection class of each endpoint."""
SESSION_ERRORS = (OSError, TimeoutError, websockets.WebSocketException, RuntimeError)
"""What opening (or losing) a session raises."""


class Run:
    def __init__(self, facts: ServerFacts, config: FuzzConfig, report: FuzzReport) -> None:
        self.facts = facts
        self.config = config
        self.report = report
        self._ids = itertools.count(1)
        self.reference: bytes | None = None
        self.budget = config.replay_budget
        self.to_minimize: list[Finding] = []
        self.stop_after: int | None = None
        """Skip the remaining barrages once this many fuzz messages were sent."""

    def next_event_id(self) -> str:
        return f"f-{next(self._ids)}"

    def record(self, findings: Iterable[Finding]) -> None:
        for finding in findings:
            if self.report.add(finding) and finding.step is not None:
                self.to_minimize.append(finding)

    # -- the bystander (oracle 3) --

    async def prepare(self) -> None:
        first, findings = await speak(self.facts, "bystander-ref-1")
        second, more = await speak(self.facts, "bystander-ref-2")
        self.record(findings + more)
        self.reference = first
        stable = first is not None and first == second
        self.report.bystander.update(reference_bytes=len(first or b""), reference_stable=stable)
        if not stable:
            detail = "two runs on an idle server differ: audio is not deterministic at all"
            self.record(
                [
                    Finding(
                        "bystander", "bystander_audio", "idle reference", detail, "bystander_audio"
                    )
                ]
            )
            self.reference = None

    async def _bystander_loop(self, stop: asyncio.Event) -> None:
        while True:
            rounds = self.report.bystander["rounds"]
            audio, findings = await speak(self.facts, f"bystander-{rounds}")
            self.report.bystander["rounds"] = rounds + 1
            mismatch = compare(self.reference, audio, "during the barrage")
            if mismatch is None and audio and self.reference is not None:
                self.report.bystander["identical"] += 1
            self.record([*findings, *([mismatch] if mismatch else [])])
            if stop.is_set():
                return

    # -- the barrage --

    async def _session(self, endpoint: str, name: str, steps: Sequence[Step]) -> None:
        """One fuzz session's script, reconnecting after the server closed the socket."""
        cls = CONNS[endpoint]
        conn: Conn | None = None
        try:
            for index, step in enumerate(steps):
                if step.fresh:
                    fresh = await cls.open(self, name, configure=False)
                    try:
                        self.record(await fresh.play(step, index))
                    finally:
                        await fresh.close()
                    continue
                if conn is None or conn.closed.is_set():
                    if conn is not None:
                        self.record(conn.judge_idle_close())
                        await conn.close()
                    conn = await cls.open(self, name)
                self.record(await conn.play(step, index))
        except SESSION_ERRORS as exc:
            detail = f"could not open a session: {exc!r}"
            self.record([Finding(endpoint, "connect_failed", name, detail, "connect")])
        finally:
            if conn is not None:
                await conn.close()

    async def _front_door(self, probes: tuple[FrontProbe, ...]) -> None:
        try:
            self.record(await play_front(self, probes))
        except SESSION_ERRORS as exc:
            detail = f"could not connect: {exc!r}"
            self.record([Finding("http", "connect_failed", "front", detail, "connect")])

    async def barrage(self, plan: Plan, example: int, front: tuple[FrontProbe, ...] = ()) -> None:
        if self.stop_after is not None and self.report.messages >= self.stop_after:
            return
        stop = asyncio.Event()
        bystander = asyncio.create_task(self._bystander_loop(stop))
        flood = None
        if self.config.flood:
            kind = FLOODS[example % len(FLOODS)]
            rate, burst = self.config.flood_budget
            source = self.config.flood_source
            flood = asyncio.create_task(flood_during(self.facts, kind, source, stop, rate, burst))
        sessions = [self._session("ws", f"w{example}x{i}", s) for i, s in enumerate(plan.native)]
        sessions += [
            self._session("stream", f"v{example}x{i}", s) for i, s in enumerate(plan.compat)
        ]
        sessions.append(self._front_door(front))
        started = time.monotonic()
        try:
            await asyncio.gather(*sessions)
        finally:
            stop.set()
            await bystander
            if flood is not None:
                summary, found = await flood
                self.report.floods.append(summary)
                self.record(found)
        self.report.examples += 1
        middle = time.monotonic()
        await self.minimize_pending()
        self.report.timings["barrage"] += middle - started
        self.report.timings["minimize"] += time.monotonic() - middle

    # -- minimization --

    async def _replay(self, finding: Finding, probes: Sequence[ProbeSpec]) -> list[str] | None:
        """Play ``probes`` on a fresh session; the frames sent if ``finding`` recurred."""
        if self.budget <= 0 or finding.step is None:
            return None
        self.budget -= 1
        step = Step(finding.step.family, tuple(probes), finding.step.fresh)
        conn = await CONNS[finding.endpoint].open(self, "r", configure=not step.fresh)
        conn.counting = False
        try:
            found = await conn.play(step, self.budget)
        finally:
            await conn.close()
        for f in found:
            if f.signature == finding.signature:
                return f.frames
        return None

    async def _minimize(self, finding: Finding) -> None:
        assert finding.step is not None
        probes = list(finding.step.probes)
        frames = None
        for _attempt in range(3):
            frames = await self._replay(finding, probes)
            if frames is not None:
                break
        if frames is None:
            finding.repro_note = (
                "did not recur when the step was replayed alone (a race, or it needs the barrage)"
            )
            return
        finding.repro = frames
        for probe in probes:
            if not probe.label.startswith(("cleanup.", "restore.")):
                single = await self._replay(finding, [probe])
                if single is not None:
                    finding.repro, finding.culprit = single, probe.label
                    return
        for i in reversed(range(len(probes))):
            if len(probes) == 1:
                break
            candidate = probes[:i] + probes[i + 1 :]
            smaller = await self._replay(finding, candidate)
            if smaller is not None:
                probes, finding.repro = candidate, smaller

    async def minimize_pending(self) -> None:
        pending, self.to_minimize = self.to_minimize, []
        for finding in pending:
            if self.budget <= 0:
                finding.repro_note = "not minimized (replay budget spent)"
                continue
            try:
                await self._minimize(finding)
            except SESSION_ERRORS as exc:
                finding.repro_note = f"replay failed: {exc!r}"

    # -- after the barrage (oracles 1 and 5) --

    async def finish(self) -> None:
        healthy, found = await health(self.facts)
        self.record(found)
        spoke, found = await fresh_native(self.facts, self.reference)
        self.record(found)
        streamed, found = await fresh_compat(self)
        self.record(found)
        self.report.server_alive = healthy and spoke and streamed
        self.report.busy_loop, spinning = await spin_check(self.facts, self.config)
        if spinning is not None:
            self.record([spinning])


def _example_runner(
    run: Run, facts: ServerFacts, config: FuzzConfig, seed: int | None
) -> Callable[[], None]:
    counter = itertools.count()

    @settings(
        max_examples=config.examples,
        deadline=None,
        derandomize=seed is None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        print_blob=False,
    )
    @given(plan=plans(facts, config), front=front_scripts(facts))
    def one_barrage(plan: Plan, front: tuple[FrontProbe, ...]) -> None:
        asyncio.run(run.barrage(plan, next(counter), front))

    return hypothesis_seed(seed)(one_barrage) if seed is not None else one_barrage


class Fuzzer:
    """Prepare (idle reference), explore (barrages), finish (liveness, spin check)."""

    def __init__(
        self, facts: ServerFacts, config: FuzzConfig, report: FuzzReport | None = None
    ) -> None:
        self.facts = facts
        self.config = config
        self.report = report or FuzzReport()
        self._run = Run(facts, config, self.report)
        self._started = time.monotonic()

    def prepare(self) -> None:
        started = time.monotonic()
        asyncio.run(self._run.prepare())
        self.report.timings["prepare"] += time.monotonic() - started

    def explore(
        self, examples: int | None = None, seed: int | None = None, stop_after: int | None = None
    ) -> None:
        """Run barrages; with ``stop_after``, skip the rest once that many messages went out."""
        self._run.stop_after = stop_after
        config = self.config
        if examples is not None:
            config = dataclasses.replace(config, examples=examples)
        _example_runner(
            self._run, self.facts, config, seed if seed is not None else self.config.seed
        )()

    def finish(self) -> FuzzReport:
        started = time.monotonic()
        asyncio.run(self._run.finish())
        self.report.timings["finish"] += time.monotonic() - started
        self.report.duration_s = time.monotonic() - self._started
        return self.report


def run_fuzz(facts: ServerFacts, config: FuzzConfig) -> FuzzReport:
    fuzzer = Fuzzer(facts, config)
    fuzzer.prepare()
    fuzzer.explore()
    return fuzzer.finish()
