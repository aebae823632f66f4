"""The compat socket's connection (``/v1/audio/speech/stream``): it has no ids, so
``input.done`` and its ``session.done`` are the barrier, and errors are counted per
step against the messages that owe or may draw one."""

from __future__ import annotations

import json
from typing import Any, Self

from bench.fuzzing.compat import COMPAT_SETUP
from bench.fuzzing.conn import BARRIER_TIMEOUT_S, Conn, Host, Turn
from bench.fuzzing.oracles import SentenceOrder
from bench.fuzzing.rules import CLOSE_NORMAL, ERROR_FRAME_MAX
from bench.fuzzing.sockets import connect


class CompatConn(Conn):
    endpoint = "stream"
    no_answer = f"no session.done for the barrier within {BARRIER_TIMEOUT_S:g} s"

    def __init__(self, run: Host, ws: Any, name: str) -> None:
        self.session_done = 0
        self.acks_expected = 0
        super().__init__(run, ws, name)

    @classmethod
    async def open(cls, run: Host, name: str, *, configure: bool = True) -> Self:
        conn = cls(run, await connect(run.facts.compat_url), name)
        if configure:
            await conn.ws.send(json.dumps(COMPAT_SETUP))
            if not await conn.input_done():
                raise RuntimeError(
                    f"the stream endpoint did not take a valid session.config (closed {conn.close_code})"
                )
        return conn

    def _make_order(self) -> SentenceOrder:
        return SentenceOrder()

    def _on_message(self, msg: dict[str, Any]) -> None:
        if msg.get("type") == "session.done":
            self.session_done += 1

    async def input_done(self) -> bool:
        """Send ``input.done``; whether its ``session.done`` came."""
        if not await self._send_barrier(json.dumps({"type": "input.done"})):
            return False
        self.acks_expected += 1
        return await self._wait(lambda: self.session_done >= self.acks_expected)

    async def _await_answers(self, turn: Turn) -> bool:
        rendered = turn.rendered
        self.acks_expected += sum(1 for r in rendered if r.spec.label == "input.done")
        if turn.step.fresh:
            await self._wait(lambda: len(self.errors) > turn.errors_from, 10.0)
            return True
        if any(CLOSE_NORMAL in r.spec.verdict.closes for r in rendered):
            return await self._wait(self.closed.is_set)
        return await self.input_done()

    def _judge_errors(self, turn: Turn, exempt_from: int) -> None:
        step, rendered, add = turn.step, turn.rendered, turn.add
        owed = [r for r in rendered[:exempt_from] if r.spec.verdict.must]
        fit = [r for r in rendered if r.spec.verdict.codes]
        counted: list[str] = []
        for msg, size in self.errors[turn.errors_from :]:
            text = str(msg.get("message", ""))
            if size > ERROR_FRAME_MAX:
                add(
                    "oversized_error",
                    step.family,
                    f"a {size}-byte error frame echoes client input",
                    "oversized_error",
                )
            if text.startswith("Internal error") or ": internal_error:" in text:
                add("internal_error", step.family, text[:200], "internal_error")
            elif not text.startswith("Generation failed"):
                counted.append(text[:160])
        if len(counted) < len(owed):
            add(
                "missing_error",
                owed[0].spec.label if len(owed) == 1 else step.family,
                f"{len(counted)} error(s) for {len(owed)} message(s) known to be invalid",
                "missing_error",
            )
        if len(counted) > len(fit):
            culprits = [r for r in fit if not r.spec.verdict.must] or rendered
            add(
                "unexpected_error",
                culprits[0].spec.label if len(culprits) == 1 else step.family,
                f"{len(counted)} error(s) where at most {len(fit)} fit: {counted[-1]!r}",
                "unexpected_error",
            )
