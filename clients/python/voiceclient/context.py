"""VoiceContext: one utterance stream of a VoiceClient (text in, audio out)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

from protocol.messages import (
    ClientMessage,
    ContextCancel,
    ContextCancelled,
    ContextDone,
    ContextEnd,
    ContextFlush,
    ContextFlushed,
    TextAppend,
    WarningMessage,
    WordTimestamp,
)
from voiceclient.chunk import AudioChunk
from voiceclient.errors import VoiceServerError

Finished = ContextDone | ContextCancelled


class TimedWords(list[WordTimestamp]):
    """One ``timestamps`` message's words, as :meth:`VoiceContext.events` yields them."""


ContextEvent = AudioChunk | TimedWords | WarningMessage
"""What :meth:`VoiceContext.events` yields, in the order the server sent it."""


class _Owner(Protocol):
    """What a context needs from its client."""

    async def send(self, msg: ClientMessage) -> None: ...

    def server_knows(self, context_id: str) -> bool: ...


class _EndOfAudio:
    """Queue marker: nothing follows (done, cancelled or failed)."""


_END = _EndOfAudio()


class VoiceContext:
    """A context created by :meth:`VoiceClient.create_context`.

    Audio is queued as it arrives, whether or not anyone iterates :meth:`audio`
    yet, so ``await ctx.done()`` followed by ``async for chunk in ctx.audio()``
    still sees every chunk. An ``error`` the server reports for this context fails
    it on the client side: :meth:`audio` raises it after the chunks that came before
    it, :meth:`done` raises it, and so do later calls that send to the context; the
    client cancels the context on the server if it is still open there.
    """

    def __init__(self, owner: _Owner, context_id: str) -> None:
        self._owner = owner
        self.context_id = context_id
        self.stream: int | None = None
        """The binary stream number (after ``context.created``)."""
        self.timestamps: list[WordTimestamp] = []
        self.warnings: list[WarningMessage] = []
        self.flushes: dict[str | None, ContextFlushed] = {}
        """``context.flushed`` messages by flush id (``None``: flushes without an id)."""
        self._queue: asyncio.Queue[ContextEvent | _EndOfAudio] = asyncio.Queue()
        self._created = asyncio.Event()
        self._finished = asyncio.Event()
        self._flush_waiters: dict[str | None, asyncio.Event] = {}
        self._result: Finished | None = None
        self._error: VoiceServerError | None = None
        self._dropping = False
        self._flush_count = 0

    # -- state ----------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """Done, cancelled or failed: nothing more arrives."""
        return self._finished.is_set()

    @property
    def error(self) -> VoiceServerError | None:
        return self._error

    # -- sending ----------------------------------------------------------------

    async def append(self, text: str, flush: bool = False) -> None:
        """Send text (any granularity; joined exactly as sent). ``flush``: synthesize
        everything buffered now."""
        await self._send(TextAppend(context_id=self.context_id, text=text, flush=flush))

    async def flush(self, flush_id: str | None = None) -> str:
        """Ask for everything buffered to be synthesized now; returns the flush id
        (made up when not given) that :meth:`flushed` waits for."""
        if flush_id is None:
            self._flush_count += 1
            flush_id = f"flush-{self._flush_count}"
        await self._send(ContextFlush(context_id=self.context_id, flush_id=flush_id))
        return flush_id

    async def end(self) -> None:
        """No more text: the server finishes the audio, then sends ``context.done``."""
        await self._send(ContextEnd(context_id=self.context_id))

    async def cancel(self, played_ms: int | None = None) -> ContextCancelled | None:
        """Barge-in: drop queued audio at once and wait for ``context.cancelled``.

        Audio not yet taken from :meth:`audio` is discarded, and so is any that arrives
        before the server confirms; the iterator then ends.
        Returns None when the context had already finished on its own.
        """
        self._drop_queued()
        if self.finished:
            return self._result if isinstance(self._result, ContextCancelled) else None
        await self._owner.send(ContextCancel(context_id=self.context_id, played_ms=played_ms))
        result = await self.done()
        return result if isinstance(result, ContextCancelled) else None

    async def _send(self, msg: ClientMessage) -> None:
        if self._error is not None:
            raise self._error
        await self._owner.send(msg)

    # -- receiving --------------------------------------------------------------

    async def audio(self) -> AsyncIterator[AudioChunk]:
        """Chunks in order until ``context.done``/``context.cancelled``; raises
        VoiceServerError if the context failed."""
        async for item in self.events():
            if isinstance(item, AudioChunk):
                yield item

    async def events(self) -> AsyncIterator[ContextEvent]:
        """Audio chunks, word timestamps and warnings in the order they arrived, until
        the context finished (ends and raises like :meth:`audio`; use one or the other,
        since both take from the same queue). ``timestamps`` and ``warnings`` keep a
        copy of what passed."""
        while True:
            item = await self._queue.get()
            if isinstance(item, _EndOfAudio):
                self._queue.put_nowait(item)  # a second iteration ends too
                if self._error is not None:
                    raise self._error
                return
            yield item

    async def read_all(self) -> bytes:
        """Every remaining audio byte, after the context finished."""
        parts = [chunk.payload async for chunk in self.audio()]
        return b"".join(parts)

    async def done(self) -> Finished:
        """The ``context.done`` (or ``context.cancelled``) message; raises
        VoiceServerError if the context failed."""
        await self._finished.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    async def flushed(self, flush_id: str | None) -> ContextFlushed:
        """Wait for the ``context.flushed`` of ``flush_id``."""
        if flush_id not in self.flushes:
            event = self._flush_waiters.setdefault(flush_id, asyncio.Event())
            finished = asyncio.ensure_future(self._finished.wait())
            flushed = asyncio.ensure_future(event.wait())
            try:
                await asyncio.wait({finished, flushed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                finished.cancel()
                flushed.cancel()
        if flush_id in self.flushes:
            return self.flushes[flush_id]
        if self._error is not None:
            raise self._error
        raise VoiceServerError(
            "context_closed", f"context {self.context_id!r} finished before flush {flush_id!r}"
        )

    async def wait_created(self) -> None:
        """Wait for ``context.created``; raises the error that rejected the context."""
        await self._created.wait()
        if self._error is not None and self.stream is None:
            raise self._error

    # -- fed by the client's reader task -----------------------------------------

    def on_created(self, stream: int) -> None:
        self.stream = stream
        self._created.set()

    def on_audio(self, chunk: AudioChunk) -> None:
        if not self._dropping and not self.finished:
            self._queue.put_nowait(chunk)

    def on_timestamps(self, words: list[WordTimestamp]) -> None:
        self.timestamps.extend(words)
        if not self._dropping and not self.finished:
            self._queue.put_nowait(TimedWords(words))

    def on_warning(self, msg: WarningMessage) -> None:
        self.warnings.append(msg)
        if not self._dropping and not self.finished:
            self._queue.put_nowait(msg)

    def on_flushed(self, msg: ContextFlushed) -> None:
        self.flushes[msg.flush_id] = msg
        waiter = self._flush_waiters.pop(msg.flush_id, None)
        if waiter is not None:
            waiter.set()

    def on_finished(self, msg: Finished) -> None:
        if self.finished:
            return
        self._result = msg
        self._close()

    def on_error(self, error: VoiceServerError) -> bool:
        """Fail the context; True when the server still has it open (cancel it there)."""
        if self.finished:
            return False
        self._error = error
        self._close()
        return self.stream is not None and self._owner.server_knows(self.context_id)

    def _close(self) -> None:
        self._created.set()
        self._finished.set()
        self._queue.put_nowait(_END)

    def _drop_queued(self) -> None:
        self._dropping = True
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if isinstance(item, _EndOfAudio):
                self._queue.put_nowait(item)
                return
        if self.finished:
            self._queue.put_nowait(_END)

    def __repr__(self) -> str:
        state = "finished" if self.finished else "open"
        return f"VoiceContext({self.context_id!r}, stream={self.stream}, {state})"
