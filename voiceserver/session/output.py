"""ContextOutput: one context's output stage, driven from the event loop.

Every endpoint turns the engine's AudioChunks into wire bytes through this, so
where the work runs is decided in one place, by the stage itself (``cheap``):

- A cheap stage (PCM at the model's own rate: a few numpy operations, 15-90 us
  for 80 ms to 1.3 s of 24 kHz audio) runs in place on the event loop. Handing it
  to a worker thread and back costs more than that (~50 us for an empty call,
  more with a busy loop) and adds a loop iteration of latency to every chunk.
- A costly one (soxr resampling, Opus, PyAV muxers: up to milliseconds a chunk)
  runs in the encode pool, so the event loop never waits on a codec.

Calls run one at a time, in the order they were made, wherever each runs: the
stage is not thread-safe, and a context's payloads must reach the wire in order.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor, Future
from typing import Protocol

import numpy as np


class Stage(Protocol):
    """What ContextOutput drives: `voiceserver.audio.OutputStage`, or an endpoint's
    own framing around one."""

    @property
    def cheap(self) -> bool: ...

    @property
    def finished(self) -> bool: ...

    def feed(self, pcm: np.ndarray, *, drain: bool = False, final: bool = False) -> list[bytes]: ...

    def close(self) -> None: ...


class ContextOutput:
    def __init__(self, stage: Stage, pool: Executor) -> None:
        self.stage = stage
        self._pool = pool
        self._turn = asyncio.Lock()
        self._pending: Future[list[bytes]] | None = None
        """The latest call handed to the pool (it may outlive a cancelled caller)."""
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def feed(
        self, pcm: np.ndarray, *, drain: bool = False, final: bool = False
    ) -> list[bytes]:
        """The payloads for one engine chunk (`OutputStage.feed`); none once closed.
        Exceptions of the stage (a failing encoder) reach the caller."""
        async with self._turn:
            await self._settle()
            if self._closed or self.stage.finished:
                return []
            if self.stage.cheap:
                return self.stage.feed(pcm, drain=drain, final=final)
            self._pending = self._pool.submit(self.stage.feed, pcm, drain=drain, final=final)
            return await asyncio.wrap_future(self._pending)

    async def _settle(self) -> None:
        # A caller cancelled while its call ran in the pool left that call running:
        # the next one must not start on the same stage meanwhile.
        pending = self._pending
        if pending is not None and not pending.done():
            await asyncio.wait([asyncio.wrap_future(pending)])

    def close(self) -> None:
        """Abandon the output (cancel, failure, client gone): no payload comes out
        after this. Idempotent; safe at any point, also while a call is in flight."""
        if self._closed:
            return
        self._closed = True
        pending = self._pending
        if pending is not None and not pending.done():
            # Never while the stage works on that thread: right after, on it.
            pending.add_done_callback(lambda _: self.stage.close())
        elif self.stage.cheap:
            self.stage.close()
        else:
            try:  # freeing a codec may take a while: off the loop too
                self._pool.submit(self.stage.close)
            except RuntimeError:  # the pool was shut down with the server
                self.stage.close()
