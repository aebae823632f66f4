"""A session's bounded outgoing queue.

One writer task drains it in order, so everything a session sends is ordered
by construction. Every queued item counts its bytes toward ``max_bytes``
(audio and JSON alike), so no kind of reply can grow a session's memory
without bound: the session checks ``over_limit`` and drops a client that lets
the queue fill.

Cancel needs two things from it: dropping a context's queued items, and
putting ``context.cancelled`` ahead of other contexts' audio, but never ahead
of the context's own ``context.created`` (a client must learn of a context
before it hears that it ended).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Queued:
    item: Any
    size: int
    context: object | None = None
    """The context the item is about (None: session-wide)."""
    opens: bool = False
    """The item announces its context (``context.created``)."""


class Outbox:
    def __init__(self, max_bytes: int) -> None:
        self._items: deque[Queued] = deque()
        self._ready = asyncio.Event()
        self.max_bytes = max_bytes
        self.queued_bytes = 0
        self.closed = False

    def put(
        self, item: Any, size: int, context: object | None = None, *, opens: bool = False
    ) -> None:
        if self.closed:
            return
        self._items.append(Queued(item, size, context, opens))
        self.queued_bytes += size
        self._ready.set()

    def put_front(self, item: Any, size: int, context: object | None = None) -> None:
        """Queue ``item`` before everything else, except its context's own
        ``context.created`` if that is still queued (then right after it)."""
        if self.closed:
            return
        entry = Queued(item, size, context)
        index = 0
        if context is not None:
            for i, queued in enumerate(self._items):
                if queued.context is context and queued.opens:
                    index = i + 1
                    break
        self._items.insert(index, entry)
        self.queued_bytes += size
        self._ready.set()

    def purge(self, context: object, keep: Callable[[Queued], bool] = lambda q: q.opens) -> None:
        """Drop the queued items of ``context`` (its ``context.created`` stays)."""
        kept = deque(q for q in self._items if q.context is not context or keep(q))
        self._items = kept
        self.queued_bytes = sum(q.size for q in kept)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def over_limit(self) -> bool:
        return self.queued_bytes > self.max_bytes

    def close(self) -> None:
        self.closed = True
        self._items.clear()
        self.queued_bytes = 0
        self._ready.set()

    async def get(self) -> Any | None:
        """Next item, or None once closed."""
        while not self._items:
            if self.closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        queued = self._items.popleft()
        self.queued_bytes -= queued.size
        return queued.item
