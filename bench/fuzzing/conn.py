"""One fuzz session's connection, as both endpoints share it: a reader task that tallies
errors and closes and feeds the ordering oracle, sending a step, and judging the
step's close and ordering. :mod:`bench.fuzzing.native_conn` and
:mod:`bench.fuzzing.compat_conn` add each endpoint's barrier and error checks."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, Self

import websockets

from bench.fuzzing.facts import ServerFacts
from bench.fuzzing.messages import Step
from bench.fuzzing.oracles import Oracle
from bench.fuzzing.render import Rendered, Renderer, show
from bench.fuzzing.report import Finding, FuzzReport
from bench.fuzzing.rules import CLOSE_ABNORMAL, CLOSE_IDLE, CLOSE_INTERNAL, CLOSE_NORMAL

BARRIER_TIMEOUT_S = 60.0

Origin = tuple[Step, list[str]]
"""A step and its frames as sent."""


class Host(Protocol):
    """What a connection needs of the run it belongs to."""

    facts: ServerFacts
    report: FuzzReport

    def next_event_id(self) -> str: ...


@dataclass
class Turn:
    """One step played on one connection: what was sent, and what was found about it."""

    endpoint: str
    step: Step
    index: int
    errors_from: int
    """How many errors the connection had received before the step."""
    problems_from: int
    """How many ordering problems the connection's oracle had before the step."""
    rendered: list[Rendered] = field(default_factory=list)
    out: list[Finding] = field(default_factory=list)

    def add_at(self, origin: Origin, kind: str, label: str, detail: str, signature: str) -> None:
        """A finding about the step (and frames) that ``origin`` names."""
        step, frames = origin
        self.out.append(Finding(self.endpoint, kind, label, detail, signature, frames, step=step))

    def add(self, kind: str, label: str, detail: str, signature: str) -> None:
        self.add_at(
            (self.step, [show(r.frame) for r in self.rendered]), kind, label, detail, signature
        )


class Conn:
    """What both endpoints share: a reader task, a close code, step bookkeeping."""

    endpoint = ""
    no_answer = ""
    """The detail of a ``no_answer`` finding: what the barrier did not get."""

    def __init__(self, run: Host, ws: Any, name: str) -> None:
        self.run = run
        self.ws = ws
        self.name = name
        self.errors: list[tuple[dict[str, Any], int]] = []
        self.closed = asyncio.Event()
        self.close_code: int | None = None
        self.close_reason = ""
        self.allow_idle_close = False
        self.sent_close = False
        self.counting = True
        self.order = self._make_order()
        self.steps_by_prefix: dict[str, Origin] = {}
        self.progress = asyncio.Event()
        """Set on every frame received (and on close): wakes up :meth:`_wait`."""
        self.session_close_sent = False
        self.close_judged = False
        self.last: Turn | None = None
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, run: Host, name: str, *, configure: bool = True) -> Self:
        """A new session; ``configure``: made ready to speak (the compat socket wants a
        ``session.config`` first, the native one starts ready)."""
        raise NotImplementedError

    def _make_order(self) -> Oracle:
        raise NotImplementedError

    def _on_message(self, msg: dict[str, Any]) -> None:
        raise NotImplementedError

    async def _await_answers(self, turn: Turn) -> bool:
        """Wait until the step is answered (its barrier); False when no answer came."""
        raise NotImplementedError

    def _judge_errors(self, turn: Turn, exempt_from: int) -> None:
        """Judge the errors that came during the step; ``exempt_from``: the index of the
        first message a close excuses from owing one."""
        raise NotImplementedError

    async def play(self, step: Step, index: int) -> list[Finding]:
        """Send the step, wait for its answers, and judge them."""
        turn = Turn(self.endpoint, step, index, len(self.errors), len(self.order.problems))
        turn.rendered = await self._send_all(step, index)
        self.last = turn
        answered = await self._await_answers(turn)
        exempt_from = self._judge_close(turn)
        if not answered and not self.closed.is_set():
            turn.add("no_answer", step.family, self.no_answer, "no_answer")
        self._judge_errors(turn, exempt_from)
        self._ordering(turn)
        return turn.out

    async def _read(self) -> None:
        try:
            async for data in self.ws:
                self.progress.set()
                if isinstance(data, bytes):
                    self.order.frame(data)
                    continue
                try:
                    msg = json.loads(data)
                except ValueError:
                    msg = None
                if not isinstance(msg, dict):
                    self.order.problem(
                        "server sent a text frame that is not a JSON object", data[:120]
                    )
                    continue
                if msg.get("type") == "error":
                    self.errors.append((msg, len(data.encode("utf-8", "surrogatepass"))))
                    if self.counting:
                        self.run.report.errors_by_code[str(msg.get("code", "vllm-error"))] += 1
                self.order.message(msg)
                self._on_message(msg)
        except websockets.ConnectionClosed:
            pass
        finally:
            code = self.ws.close_code
            self.close_code = CLOSE_ABNORMAL if code is None else int(code)
            self.close_reason = self.ws.close_reason or ""
            if self.counting:
                self.run.report.closes_by_code[str(self.close_code)] += 1
            self.closed.set()
            self.progress.set()
            self._on_closed()

    def _on_closed(self) -> None:
        pass

    async def _wait(self, ready: Callable[[], bool], timeout: float = BARRIER_TIMEOUT_S) -> bool:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.closed.is_set():
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.progress.clear()
            try:
                await asyncio.wait_for(self.progress.wait(), left)
            except TimeoutError:
                return False
        return True

    async def wait_closed(self, timeout: float = 10.0) -> None:
        """Until the reader has seen the close (a failed send can come first)."""
        try:
            await asyncio.wait_for(self.closed.wait(), timeout)
        except TimeoutError:
            pass

    async def close(self) -> None:
        if not self.closed.is_set():
            self.sent_close = True
            try:
                await asyncio.wait_for(self.ws.close(), 10)
            except (TimeoutError, OSError, websockets.WebSocketException):
                pass
        try:
            await asyncio.wait_for(self.reader, 10)
        except TimeoutError:
            self.reader.cancel()

    async def _send_barrier(self, frame: str) -> bool:
        """Send the endpoint's barrier message; False when the socket is closed."""
        if self.closed.is_set():
            return False
        try:
            await self.ws.send(frame)
        except websockets.ConnectionClosed:
            await self.wait_closed()
            return False
        if self.counting:
            self.run.report.barriers += 1
        return True

    def _prefix(self, index: int) -> str:
        """What the context ids of the session's ``index``-th step start with."""
        return f"{self.name}.{index}-"

    async def _send_all(self, step: Step, index: int) -> list[Rendered]:
        prefix = self._prefix(index)
        rendered: list[Rendered] = []
        for spec in step.probes:
            if self.closed.is_set():
                break
            r = Renderer(self.run.next_event_id(), prefix).render(spec)
            rendered.append(r)
            try:
                await self.ws.send(r.frame)
            except websockets.ConnectionClosed:
                # It may be what closed the socket (a frame past the transport cap).
                await self.wait_closed()
                break
            if CLOSE_IDLE in spec.verdict.closes:
                self.allow_idle_close = True
            if CLOSE_NORMAL in spec.verdict.closes:
                self.session_close_sent = True
        self.steps_by_prefix[prefix] = (step, [show(r.frame) for r in rendered])
        if self.counting:
            self.run.report.sent[self.endpoint] += len(rendered)
            self.run.report.families[step.family] += 1
        else:
            self.run.report.replayed += len(rendered)
        return rendered

    def _judge_close(self, turn: Turn) -> int:
        """Check a close during the step; the index of the first message it exempts."""
        if not self.closed.is_set() or self.sent_close:
            return len(turn.rendered)
        self.close_judged = True
        code = self.close_code
        for i, r in enumerate(turn.rendered):
            if code in r.spec.verdict.closes:
                return i
        if code == CLOSE_IDLE and self.allow_idle_close:
            return 0
        if code == CLOSE_NORMAL and self.session_close_sent:
            return 0
        what = (
            "the server crashed on input"
            if code == CLOSE_INTERNAL
            else "no message of the step explains it"
        )
        turn.add(
            "unexpected_close",
            turn.step.family,
            f"socket closed with {code} ({self.close_reason or 'no reason'}): {what}",
            f"close:{code}",
        )
        return 0

    def _origin(self, context_id: Any) -> Origin | None:
        """The step (and its frames as sent) whose context ids include ``context_id``."""
        if not isinstance(context_id, str):
            return None
        for prefix, origin in self.steps_by_prefix.items():
            if context_id.startswith(prefix):
                return origin
        return None

    def _ordering(self, turn: Turn) -> None:
        frames = [show(r.frame) for r in turn.rendered]
        for what, detail, cid in self.order.problems[turn.problems_from :]:
            origin = self._origin(cid) or (turn.step, frames)
            detail = f"{detail} (in a {origin[0].family} step)"
            turn.add_at(origin, "ordering", what, detail, f"ordering:{what}")

    def judge_idle_close(self) -> list[Finding]:
        """A close that came between steps: an idle timeout, or the end of session.close."""
        if self.sent_close or self.close_judged or self.close_code is None or self.last is None:
            return []
        if self.close_code == CLOSE_NORMAL and self.session_close_sent:
            return []
        if self.close_code == CLOSE_IDLE and self.allow_idle_close:
            return []
        # Judged as if the step had sent nothing: none of its messages explains it.
        turn = dataclasses.replace(self.last, rendered=[], out=[])
        self._judge_close(turn)
        for f in turn.out:
            f.frames = [show(r.frame) for r in self.last.rendered]
            f.detail += " (after the step's barrier was answered)"
        return turn.out
