"""Graceful shutdown: what runs is let finish up to a deadline, then cut.

Every session and HTTP stream registers here while it lives. On shutdown the
server stops accepting connections and calls :meth:`Lifecycle.drain`: new
work is refused (``server_shutdown``), idle members close at once, busy ones
finish what they hold; at the deadline the rest are cut (each unfinished
context gets a ``server_shutdown`` error and its socket a 1012 close; HTTP
bodies end where they are).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)

POLL_S = 0.05
CUT_GRACE_S = 1.5
"""After cutting, how long the farewells (errors, close frames) get to go out."""


class Drainable(Protocol):
    @property
    def busy(self) -> bool:
        """Has accepted work that has not finished yet."""

    def begin_drain(self) -> None:
        """Take no new work; close once idle."""

    def cut(self) -> None:
        """The deadline passed: end now, telling the client why where possible."""


class Lifecycle:
    def __init__(self) -> None:
        self.draining = False
        self._members: set[Drainable] = set()

    def register(self, member: Drainable) -> None:
        self._members.add(member)
        if self.draining:
            member.begin_drain()

    def unregister(self, member: Drainable) -> None:
        self._members.discard(member)

    @property
    def busy(self) -> int:
        return sum(1 for member in self._members if member.busy)

    async def drain(self, timeout_s: float, force: Callable[[], bool] = lambda: False) -> None:
        """Let busy members finish for up to ``timeout_s`` (or until ``force()``), then cut."""
        self.draining = True
        for member in list(self._members):
            member.begin_drain()
        deadline = time.monotonic() + timeout_s
        while self.busy and time.monotonic() < deadline and not force():
            await asyncio.sleep(POLL_S)
        left = [member for member in self._members if member.busy]
        if left:
            log.warning("shutdown deadline: cutting %d unfinished session(s)/request(s)", len(left))
        for member in list(self._members):
            member.cut()
        grace = time.monotonic() + CUT_GRACE_S
        while self._members and time.monotonic() < grace and not force():
            await asyncio.sleep(POLL_S)
