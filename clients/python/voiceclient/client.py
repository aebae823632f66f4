"""VoiceClient: an asyncio client for wire protocol v1 over ``websockets``.

One reader task per connection takes every frame off the socket and hands it to
the context it belongs to (by the stream number ``context.created`` announced,
through :class:`protocol.ClientSession`); contexts queue their audio until the
caller reads it. Sending happens on the caller's task.

::

    async with VoiceClient.connect("ws://127.0.0.1:8000/v1/audio/speech/ws") as vc:
        ctx = await vc.create_context(voice="joe")
        await ctx.append("Hello there. ")
        await ctx.end()
        async for chunk in ctx.audio():
            play(chunk.payload)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Generator, Mapping
from typing import Any

import msgspec
import websockets
from websockets.asyncio.client import ClientConnection

from protocol.client_session import ClientSession
from protocol.codec import encode_client
from protocol.errors import ProtocolError
from protocol.messages import (
    AudioMessage,
    BufferConfig,
    ClientMessage,
    ContextCancel,
    ContextCancelled,
    ContextCreate,
    ContextCreated,
    ContextDone,
    ContextFlushed,
    ErrorMessage,
    Keepalive,
    Limits,
    OutputFormat,
    ServerMessage,
    SessionClose,
    SessionCreated,
    SessionSettings,
    SessionUpdate,
    SessionUpdated,
    Timestamps,
    WarningMessage,
)
from voiceclient.chunk import AudioChunk
from voiceclient.context import VoiceContext
from voiceclient.errors import VoiceConnectionError, VoiceServerError

log = logging.getLogger(__name__)

# Audio frames are small; this only guards against a runaway peer.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def _convert(value: Any, kind: type[msgspec.Struct]) -> Any:
    if value is None or isinstance(value, kind):
        return value
    if isinstance(value, Mapping):
        return msgspec.convert(dict(value), kind)
    raise TypeError(f"expected {kind.__name__} or a mapping, got {type(value).__name__}")


class VoiceClient:
    """A connected session. Make one with :meth:`connect`."""

    def __init__(self, ws: ClientConnection, session: ClientSession) -> None:
        self._ws = ws
        self._session = session
        self._contexts: dict[str, VoiceContext] = {}
        self._updates: dict[str, asyncio.Future[SessionSettings]] = {}
        self._ids = itertools.count(1)
        self._background: set[asyncio.Task[None]] = set()
        self._fatal: VoiceServerError | None = None
        self._lost: VoiceConnectionError | None = None
        self._closing = False
        self.session_errors: list[VoiceServerError] = []
        """Errors that belong to no open context or pending request, in order."""
        self.warnings: list[WarningMessage] = []
        """Warnings that name no open context."""
        self._reader = asyncio.create_task(self._read(), name="voiceclient-reader")

    # -- connecting -------------------------------------------------------------

    @staticmethod
    def connect(
        url: str,
        api_key: str | None = None,
        *,
        open_timeout: float = 10.0,
        **session_defaults: Any,
    ) -> _Connect:
        """Open a session: ``async with VoiceClient.connect(url) as vc`` (closes on exit)
        or ``vc = await VoiceClient.connect(url)``.

        ``session_defaults`` are ``session.update`` fields (model, voice, language,
        speed, instructions, output_format, audio_transport, timestamps,
        idle_timeout_s); when given they are sent and confirmed before this returns.
        Raises VoiceConnectionError (code ``unauthorized`` for HTTP 401,
        ``connect_failed`` otherwise).
        """
        return _Connect(url, api_key, open_timeout, session_defaults)

    @property
    def session_id(self) -> str:
        assert self._session.session_id is not None
        return self._session.session_id

    @property
    def settings(self) -> SessionSettings:
        """The effective session settings the server last announced."""
        assert self._session.settings is not None
        return self._session.settings

    @property
    def limits(self) -> Limits:
        assert self._session.limits is not None
        return self._session.limits

    @property
    def closed(self) -> bool:
        return self._lost is not None

    # -- requests ---------------------------------------------------------------

    async def update_session(self, **fields: Any) -> SessionSettings:
        """Send ``session.update`` and return the settings the server confirmed."""
        if "output_format" in fields:
            fields["output_format"] = _convert(fields["output_format"], OutputFormat)
        event_id = f"update-{next(self._ids)}"
        waiter: asyncio.Future[SessionSettings] = asyncio.get_running_loop().create_future()
        self._updates[event_id] = waiter
        try:
            await self.send(SessionUpdate(event_id=event_id, **fields))
            return await waiter
        finally:
            self._updates.pop(event_id, None)

    async def create_context(
        self,
        context_id: str | None = None,
        *,
        voice: str | None = None,
        language: str | None = None,
        speed: float | None = None,
        instructions: str | None = None,
        output_format: OutputFormat | Mapping[str, Any] | None = None,
        buffer: BufferConfig | Mapping[str, Any] | None = None,
        ref_audio: str | None = None,
        ref_text: str | None = None,
        speaker_embedding: list[float] | None = None,
        wait: bool = True,
    ) -> VoiceContext:
        """Open a context (an id is made up when none is given).

        ``wait``: return after ``context.created`` and raise VoiceServerError if the
        server rejects the context (unknown voice, too many contexts, ...). Without
        it the context is usable at once and a rejection surfaces from
        :meth:`VoiceContext.audio`/:meth:`VoiceContext.done`.
        """
        if context_id is None:
            context_id = self._new_context_id()
        elif context_id in self._contexts:
            raise VoiceServerError(
                "context_exists", f"context {context_id!r} is still open on this client"
            )
        msg = ContextCreate(
            context_id=context_id,
            voice=voice,
            language=language,
            speed=speed,
            instructions=instructions,
            output_format=_convert(output_format, OutputFormat),
            buffer=_convert(buffer, BufferConfig),
            ref_audio=ref_audio,
            ref_text=ref_text,
            speaker_embedding=speaker_embedding,
        )
        ctx = VoiceContext(self, context_id)
        self._contexts[context_id] = ctx
        try:
            await self.send(msg)
            if wait:
                await ctx.wait_created()
        except BaseException:
            if self._contexts.get(context_id) is ctx:
                del self._contexts[context_id]
            raise
        return ctx

    async def synthesize(self, text: str, **context_options: Any) -> bytes:
        """The whole audio of ``text`` in one context (options as :meth:`create_context`)."""
        ctx = await self.create_context(**context_options)
        await ctx.append(text)
        await ctx.end()
        return await ctx.read_all()

    async def keepalive(self) -> None:
        await self.send(Keepalive())

    async def close(self, drain: bool = False) -> None:
        """Close the connection. ``drain``: send ``session.close`` and let the server
        finish every open context first; otherwise open contexts are cancelled and
        whoever waits on them gets VoiceConnectionError."""
        if self._closing:
            await self._wait_reader()
            return
        self._closing = True
        if drain and self._lost is None:
            with contextlib.suppress(VoiceServerError):
                await self.send(SessionClose())
            await self._wait_reader()
        await self._ws.close()
        await self._wait_reader()

    async def send(self, msg: ClientMessage) -> None:
        """Send one protocol message (contexts use this; so may callers for raw access)."""
        if self._lost is not None:
            raise self._lost
        try:
            await self._ws.send(encode_client(msg))
        except websockets.ConnectionClosed:
            await self._wait_reader()
            raise self._lost or self._connection_lost() from None

    def server_knows(self, context_id: str) -> bool:
        """True while the server has the context open (announced and not finished)."""
        return self._session.stream_of(context_id) is not None

    def _new_context_id(self) -> str:
        while True:
            context_id = f"ctx-{next(self._ids)}"
            if context_id not in self._contexts:
                return context_id

    async def _wait_reader(self) -> None:
        await asyncio.wait([self._reader])

    # -- the reader task ------------------------------------------------------------

    async def _read(self) -> None:
        try:
            async for data in self._ws:
                now = time.monotonic()
                if isinstance(data, bytes):
                    self._on_binary(data, now)
                else:
                    self._on_text(data, now)
        except websockets.ConnectionClosed:
            pass
        except Exception:
            log.exception("voiceclient reader failed")
            await self._ws.close()
        finally:
            self._lost = self._connection_lost()
            self._fail_everything(self._lost)

    def _on_binary(self, data: bytes, now: float) -> None:
        try:
            frame = self._session.receive_bytes(data)
        except ProtocolError as err:
            self._on_protocol_error(err)
            return
        ctx = self._contexts.get(frame.context_id or "")
        if ctx is not None:
            ctx.on_audio(
                AudioChunk(frame.seq, frame.payload, frame.flush_end, frame.context_end, now)
            )

    def _on_text(self, data: str, now: float) -> None:
        try:
            messages = self._session.receive_text(data)
        except ProtocolError as err:
            self._on_protocol_error(err)
            return
        for msg in messages:
            self._dispatch(msg, now)

    def _dispatch(self, msg: ServerMessage, now: float) -> None:
        match msg:
            case ContextCreated():
                if ctx := self._contexts.get(msg.context_id):
                    ctx.on_created(msg.stream)
            case AudioMessage():
                if ctx := self._contexts.get(msg.context_id):
                    ctx.on_audio(AudioChunk(msg.seq, msg.audio, False, False, now))
            case Timestamps():
                if ctx := self._contexts.get(msg.context_id):
                    ctx.on_timestamps(msg.words)
            case ContextFlushed():
                if ctx := self._contexts.get(msg.context_id):
                    ctx.on_flushed(msg)
            case ContextDone() | ContextCancelled():
                if ctx := self._contexts.pop(msg.context_id, None):
                    ctx.on_finished(msg)
            case WarningMessage():
                if ctx := self._contexts.get(msg.context_id or ""):
                    ctx.on_warning(msg)
                else:
                    self.warnings.append(msg)
            case ErrorMessage():
                self._on_error(msg)
            case SessionUpdated():
                waiter = self._updates.get(msg.event_id or "")
                if waiter is not None and not waiter.done():
                    waiter.set_result(msg.session)
            case SessionCreated():
                pass

    def _on_error(self, msg: ErrorMessage) -> None:
        err = VoiceServerError.from_message(msg)
        if msg.fatal:
            self._fatal = err
        waiter = self._updates.get(msg.event_id or "")
        if waiter is not None and not waiter.done():
            waiter.set_exception(err)
        elif (ctx := self._contexts.get(msg.context_id or "")) is not None:
            self._fail_context(ctx, err)
        else:
            self.session_errors.append(err)

    def _on_protocol_error(self, err: ProtocolError) -> None:
        """The server sent something that breaks the protocol: fail what it concerns."""
        error = VoiceServerError.from_protocol(err)
        ctx = self._contexts.get(err.context_id or "")
        if ctx is not None:
            self._fail_context(ctx, error)
        else:
            log.warning("voiceclient: %s", error)
            self.session_errors.append(error)

    def _fail_context(self, ctx: VoiceContext, err: VoiceServerError) -> None:
        if self._contexts.get(ctx.context_id) is ctx:
            del self._contexts[ctx.context_id]
        if ctx.on_error(err) and not self._closing:
            # The server keeps the context open after some errors (text_too_long):
            # free its slot, since this client has given up on it.
            self._spawn(self._send_quietly(ContextCancel(context_id=ctx.context_id)))

    async def _send_quietly(self, msg: ClientMessage) -> None:
        with contextlib.suppress(VoiceServerError):
            await self.send(msg)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _connection_lost(self) -> VoiceConnectionError:
        code = self._ws.close_code
        reason = self._ws.close_reason or ""
        if self._fatal is not None:
            message = f"{self._fatal.code}: {self._fatal.message}"
        elif self._closing:
            message = "the client closed the connection"
        else:
            detail = f"{code} {reason}".strip() if code is not None else "no close frame"
            message = f"the server closed the connection ({detail})"
        return VoiceConnectionError("connection_closed", message, close_code=code)

    def _fail_everything(self, err: VoiceConnectionError) -> None:
        for ctx in list(self._contexts.values()):
            ctx.on_error(err)
        self._contexts.clear()
        for waiter in self._updates.values():
            if not waiter.done():
                waiter.set_exception(err)


class _Connect:
    """Awaitable and async context manager returned by :meth:`VoiceClient.connect`."""

    def __init__(
        self, url: str, api_key: str | None, open_timeout: float, defaults: dict[str, Any]
    ) -> None:
        self._url = url
        self._api_key = api_key
        self._open_timeout = open_timeout
        self._defaults = defaults
        self._client: VoiceClient | None = None

    def __await__(self) -> Generator[Any, None, VoiceClient]:
        return self._open().__await__()

    async def __aenter__(self) -> VoiceClient:
        self._client = await self._open()
        return self._client

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._client is not None
        await self._client.close()

    async def _open(self) -> VoiceClient:
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else None
        try:
            ws = await websockets.connect(
                self._url,
                additional_headers=headers,
                max_size=MAX_MESSAGE_BYTES,
                open_timeout=self._open_timeout,
                # Audio does not deflate well; compression only costs latency.
                compression=None,
            )
        except websockets.InvalidStatus as exc:
            status = exc.response.status_code
            code = "unauthorized" if status == 401 else "connect_failed"
            raise VoiceConnectionError(
                code, f"{self._url} refused the connection with HTTP {status}"
            ) from exc
        except (OSError, TimeoutError, websockets.InvalidHandshake, websockets.InvalidURI) as exc:
            raise VoiceConnectionError(
                "connect_failed", f"cannot connect to {self._url}: {exc}"
            ) from exc
        session = ClientSession()
        try:
            first = await asyncio.wait_for(ws.recv(), self._open_timeout)
            messages = session.receive_text(first) if isinstance(first, str) else []
        except (TimeoutError, websockets.ConnectionClosed, ProtocolError) as exc:
            await ws.close()
            raise VoiceConnectionError(
                "connect_failed", f"{self._url} did not start a session: {exc}"
            ) from exc
        if not messages or not isinstance(messages[0], SessionCreated):
            await ws.close()
            raise VoiceConnectionError(
                "connect_failed", f"{self._url} did not send session.created first"
            )
        client = VoiceClient(ws, session)
        if self._defaults:
            try:
                await client.update_session(**self._defaults)
            except BaseException:
                await client.close()
                raise
        return client


async def synthesize(
    url: str, text: str, *, api_key: str | None = None, **context_options: Any
) -> bytes:
    """Connect, synthesize ``text`` in one context, disconnect; the audio bytes."""
    async with VoiceClient.connect(url, api_key) as vc:
        return await vc.synthesize(text, **context_options)
