"""A session's bounded outgoing queue.

One writer task drains it in order, so everything a session sends is ordered
by construction. Cancel needs two things from it: dropping a context's queued
audio, and putting ``context.cancelled`` ahead of other contexts' audio.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any


class Outbox:
    def __init__(self, max_bytes: int) -> None:
        self._items: deque[tuple[Any, int]] = deque()
        self._ready = asyncio.Event()
        self.max_bytes = max_bytes
        self.queued_bytes = 0
        self.closed = False

    def put(self, item: Any, size: int = 0) -> None:
        self._items.append((item, size))
        self.queued_bytes += size
        self._ready.set()

    def put_front(self, item: Any) -> None:
        self._items.appendleft((item, 0))
        self._ready.set()

    def purge(self, drop: Callable[[Any], bool]) -> None:
        kept = deque((i, s) for i, s in self._items if not drop(i))
        self.queued_bytes = sum(s for _, s in kept)
        self._items = kept

    @property
    def over_limit(self) -> bool:
        return self.queued_bytes > self.max_bytes

    def close(self) -> None:
        self.closed = True
        self._ready.set()

    async def get(self) -> Any | None:
        """Next item, or None once closed."""
        while not self._items:
            if self.closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        item, size = self._items.popleft()
        self.queued_bytes -= size
        return item
