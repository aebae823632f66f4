"""The flooder (oracle 6): one more client floods during every barrage.

It sends one kind of flood per barrage as fast as the socket takes it (``text.append``,
create/cancel pairs, malformed JSON, refused vllm-omni messages: ``bench.flood``),
reconnecting whenever it is closed, from an address of its own (``FuzzConfig.
flood_source``), so that it is a client apart from the bystander and the fuzz
sessions. What must hold:

- it is limited: past its budget it is told (``rate_limited``, a 1008 close, an HTTP
  429 at the upgrade), and the server never closes it with 1011 or refuses it with
  anything but 429 (or 1013/503 when the server is full);
- the others do not notice: the bystander's audio stays byte-identical (oracle 3)
  and the fuzz sessions' answers stay what their verdicts expect.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

import websockets

from bench.flood import YIELD_EVERY, messages
from bench.fuzzing.facts import ServerFacts
from bench.fuzzing.report import Finding
from bench.fuzzing.sockets import CONNECT_TIMEOUT_S

ALLOWED_CLOSES = frozenset({1008, 1013})
"""A flooder is closed for its rate (1008) or finds the server full (1013)."""
ALLOWED_STATUSES = frozenset({429, 503})
NATIVE_CODES = frozenset(
    {
        "rate_limited",
        "invalid_json",
        "unknown_context",
        "context_exists",
        "context_closed",
        "text_too_long",
        "too_many_contexts",
        "overloaded",
    }
)
"""Error codes a flood of these messages may get on the native socket."""


def _finding(kind: str, label: str, detail: str) -> Finding:
    return Finding("flood", kind, label, detail, kind)


class Flood:
    """One barrage's flood: runs until ``stop`` is set, then judges what it saw."""

    def __init__(self, facts: ServerFacts, kind: str, source: str | None) -> None:
        self.kind = kind
        self.url = facts.compat_url if kind == "vllm" else facts.ws_url
        self.connect: dict[str, Any] = {"local_addr": (source, 0)} if source else {}
        self.sent = 0
        self.connections = 0
        self.limited = 0
        """Signs it was limited: rate_limited errors, 1008 closes, 429 refusals."""
        self.errors: Counter[str] = Counter()
        self.closes: Counter[int] = Counter()
        self.statuses: Counter[int] = Counter()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                ws = await websockets.connect(
                    self.url, max_size=None, open_timeout=CONNECT_TIMEOUT_S, **self.connect
                )
            except websockets.InvalidStatus as exc:
                status = exc.response.status_code
                self.statuses[status] += 1
                self.limited += status == 429
                continue
            except (OSError, TimeoutError, websockets.InvalidHandshake):
                await asyncio.sleep(0.05)
                continue
            self.connections += 1
            reader = asyncio.create_task(self._read(ws))
            try:
                for message in messages(self.kind):
                    if stop.is_set():
                        break
                    await ws.send(message)
                    self.sent += 1
                    if not self.sent % YIELD_EVERY:
                        await asyncio.sleep(0)
            except websockets.ConnectionClosed:
                pass
            finally:
                await ws.close()
                await reader

    async def _read(self, ws: websockets.ClientConnection) -> None:
        try:
            async for data in ws:
                if isinstance(data, bytes):
                    continue
                msg = json.loads(data)
                if msg.get("type") != "error":
                    continue
                code = str(msg.get("code") or msg.get("message", "").split(":", 1)[0])
                self.errors[code] += 1
                self.limited += code == "rate_limited"
        except websockets.ConnectionClosed:
            pass
        close = ws.protocol.close_rcvd
        if close is not None:
            self.closes[close.code] += 1
            self.limited += close.code == 1008

    def judge(self, budget: float) -> list[Finding]:
        """Findings: a close or status that does not fit, a native error code that does
        not fit, or no sign of a limit although more than ``budget`` messages went out."""
        found = []
        odd_closes = sorted(c for c in self.closes if c not in ALLOWED_CLOSES)
        if odd_closes:
            found.append(
                _finding("flood_close", self.kind, f"closed with {odd_closes}: {self.summary()}")
            )
        odd_statuses = sorted(s for s in self.statuses if s not in ALLOWED_STATUSES)
        if odd_statuses:
            found.append(
                _finding(
                    "flood_refusal", self.kind, f"refused with {odd_statuses}: {self.summary()}"
                )
            )
        if self.kind != "vllm":
            odd_codes = sorted(c for c in self.errors if c not in NATIVE_CODES)
            if odd_codes:
                found.append(
                    _finding("flood_error", self.kind, f"error codes {odd_codes}: {self.summary()}")
                )
        if budget and self.sent > budget and not self.limited:
            found.append(
                _finding(
                    "flood_unlimited",
                    self.kind,
                    f"{self.sent} messages past a budget of {budget:g} and never limited",
                )
            )
        return found

    def summary(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "sent": self.sent,
            "connections": self.connections,
            "limited": self.limited,
            "errors": dict(self.errors),
            "closes": {str(k): v for k, v in self.closes.items()},
            "statuses": {str(k): v for k, v in self.statuses.items()},
        }


async def flood_during(
    facts: ServerFacts,
    kind: str,
    source: str | None,
    stop: asyncio.Event,
    budget_per_s: float,
    burst: float,
) -> tuple[dict[str, Any], list[Finding]]:
    """Flood until ``stop``; what it did and what it found."""
    flood = Flood(facts, kind, source)
    started = time.monotonic()
    await flood.run(stop)
    budget = burst + budget_per_s * (time.monotonic() - started) if budget_per_s else 0.0
    return flood.summary(), flood.judge(2 * budget)
