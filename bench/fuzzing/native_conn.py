"""The native socket's connection (``/v1/audio/speech/ws``): an empty ``session.update``
after each step is the barrier (its answer is queued after every answer to the step),
and every error must echo the ``event_id`` of a message it fits."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Self

from bench.fuzzing.conn import BARRIER_TIMEOUT_S, Conn, Host, Turn
from bench.fuzzing.oracles import ContextOrder
from bench.fuzzing.render import Rendered
from bench.fuzzing.rules import ECHO_MAX, ERROR_FRAME_MAX
from bench.fuzzing.sockets import CONNECT_TIMEOUT_S, connect


class NativeConn(Conn):
    endpoint = "ws"
    no_answer = f"no answer to the barrier after the step within {BARRIER_TIMEOUT_S:g} s"
    order: ContextOrder

    def __init__(self, run: Host, ws: Any, name: str) -> None:
        self.barrier_id: str | None = None
        self.barrier: asyncio.Future[dict[str, Any] | None] | None = None
        super().__init__(run, ws, name)

    @classmethod
    async def open(cls, run: Host, name: str, *, configure: bool = True) -> Self:
        ws = await connect(run.facts.ws_url)
        created = json.loads(await asyncio.wait_for(ws.recv(), CONNECT_TIMEOUT_S))
        if created.get("type") != "session.created":
            raise RuntimeError(f"first message was not session.created: {created}")
        return cls(run, ws, name)

    def _make_order(self) -> ContextOrder:
        return ContextOrder()

    def _on_message(self, msg: dict[str, Any]) -> None:
        barrier = self.barrier
        answers = msg.get("event_id") == self.barrier_id and msg.get("type") in (
            "session.updated",
            "error",
        )
        if barrier is not None and not barrier.done() and answers:
            barrier.set_result(msg)

    def _on_closed(self) -> None:
        if self.barrier is not None and not self.barrier.done():
            self.barrier.set_result(None)

    async def _await_answers(self, turn: Turn) -> bool:
        answer = await self._barrier()
        if answer is not None and answer.get("code") == "session_closing":
            # session.close was taken: the socket closes (1000) once its contexts end.
            await self.wait_closed(BARRIER_TIMEOUT_S)
            if not self.closed.is_set():
                detail = f"session.close was taken but the socket stayed open for {BARRIER_TIMEOUT_S:g} s"
                turn.add("no_answer", turn.step.family, detail, "no_close")
        prefix = self._prefix(turn.index)
        if turn.step.settle and answer is not None:
            settled = await self._wait(
                lambda: not any(c.startswith(prefix) for c in self.order.live)
            )
            if not settled and not self.closed.is_set():
                detail = f"a context of the step did not end within {BARRIER_TIMEOUT_S:g} s"
                turn.add("no_answer", turn.step.family, detail, "no_end")
        return answer is not None

    async def _barrier(self) -> dict[str, Any] | None:
        """Send the barrier; its answer (None: none came, or the socket closed)."""
        if self.closed.is_set():
            return None
        self.barrier_id = f"b-{self.run.next_event_id()}"
        self.barrier = asyncio.get_running_loop().create_future()
        sent = await self._send_barrier(
            json.dumps({"type": "session.update", "event_id": self.barrier_id})
        )
        if not sent:
            return None
        try:
            return await asyncio.wait_for(self.barrier, BARRIER_TIMEOUT_S)
        except TimeoutError:
            return None

    def _match(
        self, event_id: Any, by_id: dict[str, tuple[int, Rendered]]
    ) -> tuple[int, Rendered] | None:
        if not isinstance(event_id, str):
            return None
        if event_id in by_id:
            return by_id[event_id]
        # A server may cut a long id short; the cut must still be a prefix of it.
        base = event_id.split("~", 1)[0]
        for sent_id, hit in by_id.items():
            if "~" in sent_id and sent_id.split("~", 1)[0] == base and sent_id.startswith(event_id):
                return hit
        return None

    def _judge_errors(self, turn: Turn, exempt_from: int) -> None:
        step, rendered, add = turn.step, turn.rendered, turn.add
        by_id = {r.event_id: (i, r) for i, r in enumerate(rendered) if r.event_id}
        answered: set[int] = set()
        for msg, size in self.errors[turn.errors_from :]:
            code = str(msg.get("code"))
            event_id = msg.get("event_id")
            text = str(msg.get("message", ""))[:160]
            hit = self._match(event_id, by_id)
            label = hit[1].spec.label if hit else step.family
            if size > ERROR_FRAME_MAX:
                add(
                    "oversized_error",
                    f"{code} error",
                    f"a {size}-byte error frame ({code}) echoes client input",
                    "oversized_error",
                )
            if isinstance(event_id, str) and len(event_id) > ECHO_MAX:
                add(
                    "echo_too_long",
                    label,
                    f"error {code} echoes an event_id of {len(event_id)} characters",
                    "echo_too_long",
                )
            if code == "internal_error":
                origin = None if hit else self._origin(msg.get("context_id"))
                if origin is None:
                    add("internal_error", label, f"internal_error: {text!r}", "internal_error")
                else:
                    detail = (
                        f"internal_error: {text!r} (for a context of a {origin[0].family} step)"
                    )
                    turn.add_at(
                        origin, "internal_error", origin[0].family, detail, "internal_error"
                    )
            if event_id is not None and hit is None:
                if event_id == self.barrier_id:
                    if code != "session_closing":
                        add(
                            "unexpected_error",
                            "barrier (empty session.update)",
                            f"{code}: {text!r}",
                            f"unexpected_error:{code}",
                        )
                elif code != "internal_error":
                    add(
                        "unknown_event_id",
                        step.family,
                        f"error {code} echoes an event_id that was not sent: {str(event_id)[:60]!r}",
                        "unknown_event_id",
                    )
                continue
            if hit is None:
                hit = next(
                    (
                        (i, r)
                        for i, r in enumerate(rendered)
                        if i not in answered
                        and (r.event_id is None or r.spec.verdict.echo == "optional")
                        and code in r.spec.verdict.codes
                    ),
                    None,
                )
                context_id = msg.get("context_id")
                refusal = (
                    isinstance(context_id, str)
                    and context_id.startswith(f"{self.name}.")
                    and any(code in r.spec.verdict.codes for r in rendered)
                )
                if hit is None and refusal:
                    continue  # the model refused text of a context while speaking it
                if hit is None:
                    if code != "internal_error":
                        add(
                            "unexpected_error",
                            step.family,
                            f"{code} ({text!r}) fits no message of the step",
                            f"unexpected_error:{code}",
                        )
                    continue
            i, r = hit
            answered.add(i)
            if code not in r.spec.verdict.codes and code != "internal_error":
                fits = ", ".join(sorted(r.spec.verdict.codes)) or "no error at all"
                add(
                    "unexpected_error",
                    r.spec.label,
                    f"got {code} ({text!r}); fits: {fits}",
                    f"unexpected_error:{code}",
                )
        for i, r in enumerate(rendered[:exempt_from]):
            if r.spec.verdict.must and i not in answered:
                fits = ", ".join(sorted(r.spec.verdict.codes))
                add(
                    "missing_error",
                    r.spec.label,
                    f"no error for a message known to be invalid (fits: {fits})",
                    "missing_error",
                )
