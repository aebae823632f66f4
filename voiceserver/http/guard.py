"""One HTTP request's life: cancelled when its client leaves, cut at shutdown.

A request that runs the engine (speech, SSE, batch) must stop the moment its
client is gone, not when the audio is done: :func:`cancel_on_disconnect` races
the work against the client's ``http.disconnect``. While it runs, the request
is registered with the server's :class:`~voiceserver.lifecycle.Lifecycle`, so
a shutdown waits for it up to its deadline and then cuts it (the connection is
aborted; a streamed body ends truncated, which clients see as an error).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Scope, Send

from voiceserver.lifecycle import Lifecycle
from voiceserver.transport.connection import abort_connection

T = TypeVar("T")

CLIENT_GONE_STATUS = 499
"""Logged for requests whose client left before the answer (nobody reads it)."""


class ClientGone(Exception):
    """The client disconnected before the request finished."""


class RequestGuard:
    def __init__(self, request: Request, lifecycle: Lifecycle) -> None:
        self.request = request
        self._lifecycle = lifecycle
        self._task = asyncio.current_task()
        self._released = False
        lifecycle.register(self)

    @property
    def busy(self) -> bool:
        return not self._released

    def begin_drain(self) -> None:
        pass  # the request finishes what it started; new requests are refused elsewhere

    def cut(self) -> None:
        if self._released:
            return
        if not abort_connection(self.request.scope) and self._task is not None:
            self._task.cancel()

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._lifecycle.unregister(self)


async def until_disconnected(request: Request) -> None:
    """Return once the client has gone (the body must have been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Run ``work``; if the client disconnects first, cancel it and raise ClientGone."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(until_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
        watcher.cancel()
    if task.cancelled() or not task.done():
        try:
            await task
        except asyncio.CancelledError:
            pass
        raise ClientGone
    return task.result()


def client_gone_response() -> Response:
    return Response(status_code=CLIENT_GONE_STATUS)


class SlowClient(Exception):
    """A response chunk could not be sent within the deadline: the client stopped reading."""


def send_within(scope: Scope, send: Send, deadline_s: float) -> Send:
    """``send`` with a deadline on every message: past it the connection is aborted (its
    unsent bytes dropped) and SlowClient raised, so a streamed body never waits on a
    client that stopped reading."""

    async def send_or_drop(message: Message) -> None:
        try:
            async with asyncio.timeout(deadline_s):
                await send(message)
        except TimeoutError:
            abort_connection(scope)
            raise SlowClient from None

    return send_or_drop
