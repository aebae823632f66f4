"""uvicorn's HTTP and WebSocket protocols with the guards a public server needs.

- A header deadline: a connection must finish each request's headers within
  ``header_timeout_s`` of opening (or of the request's first byte on a kept-alive
  connection), else it gets 408 and is closed. uvicorn itself waits forever, so
  twenty half-sent requests (slowloris) would hold twenty connections for good.
- A header size limit: a request line plus headers over ``max_header_bytes``
  gets 431 and the connection is closed (uvicorn reads headers of any size: a
  45 MiB one was answered); so do a chunked body's trailers. WebSocket
  handshakes also get 431 for what the WebSocket library would refuse without
  an answer (a line over its 8 KiB, more than its 128 headers).
- Pipelining within bounds: uvicorn parses every request of each read (~7,000
  ``GET``s in 256 KiB), queues them all, and reads again after every answer, so a
  client that sends requests without reading the answers grows the server
  without end (six such clients: +3.6 GB in 38 s). Here bytes are parsed in
  small slices and no further than one request beyond the one being answered;
  the rest of a read waits, and the socket is not read, until the answers are
  taken. A connection holds at most one read of bytes and a slice of requests.
- A write deadline: a connection whose answers stay stuck behind a client that
  reads nothing for ``write_stall_s`` is reset.
- An ``abort`` hook in every request's and WebSocket's scope
  (:mod:`voiceserver.transport.connection`), so the application can drop a
  client that stopped reading instead of waiting behind its unsent bytes.
- permessage-deflate for text frames only (:class:`TextDeflate`): binary frames
  carry audio, which deflate barely shrinks and may grow (measured by
  bench/ws_compression.py on Piper's speech: PCM -23 %, Ogg/Opus -11 %, FLAC -2 %,
  raw Opus packets +2.5 %, incompressible data +0.24 %, so a 1 MiB frame reached
  clients as 1,051,142 bytes, past the 1 MiB a ``websockets`` client takes by
  default: close 1009) for 30 to 120 ms of CPU per MB on the event loop. Binary
  frames go out as sent, so a frame's size on the wire is its size; JSON (events,
  base64 audio) is still compressed: events to a third, base64 PCM to 0.63.

These subclass uvicorn's httptools and websockets-sansio protocols (the ones
uvicorn[standard] picks); pyproject pins uvicorn's minor version because they
rely on its internals (``on_message_begin``, ``on_headers_complete``,
``on_response_complete``, ``pipeline``, ``flow``, ``handle_connect``). The tests
exercise every guard over real sockets.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct
from collections.abc import Callable
from typing import Any

import httptools
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.extensions.base import ServerExtensionFactory
from websockets.extensions.permessage_deflate import (
    PerMessageDeflate,
    ServerPerMessageDeflateFactory,
)
from websockets.frames import BINARY, CONT, Frame
from websockets.http11 import MAX_LINE_LENGTH, MAX_NUM_HEADERS

from protocol.errors import ErrorCode
from voiceserver.transport.connection import set_abort

log = logging.getLogger(__name__)

_BAD_REQUEST = (
    b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 30\r\nconnection: close\r\n\r\nInvalid HTTP request received."
)
_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 43\r\nconnection: close\r\n\r\n"
    b"request headers did not arrive in time\r\n\r\n\r\n"
)
PARSE_SLICE = 1024
"""Bytes handed to the parser at a time: how far it may run past the point where
parsing must stop (one slice holds at most ~50 of the smallest requests)."""
LINGER_S = 1.0
"""After a 431, how long the rest of the request is read and dropped before the
connection closes, so the client reads the answer instead of a reset."""
HEADERS_TOO_LARGE = str(ErrorCode.HEADERS_TOO_LARGE)


class HeadersTooLarge(Exception):
    """Raised inside the parser to stop it: the request's headers are over the limit."""


class HeldFlow(FlowControl):
    """uvicorn's read flow control, plus a hold the protocol keeps while it has
    bytes it has not parsed yet: reading stays paused whatever uvicorn asks."""

    def __init__(self, transport: asyncio.Transport, on_resume: Callable[[], None]) -> None:
        super().__init__(transport)
        self.wanted = True
        """What uvicorn last asked for: False while a request waits in its pipeline
        or a request body it has not handed to the application is over 64 KiB."""
        self.held = False
        self._on_resume = on_resume

    def pause_reading(self) -> None:
        self.wanted = False
        self._apply()

    def resume_reading(self) -> None:
        self.wanted = True
        self._apply()
        self._on_resume()

    def hold(self, held: bool) -> None:
        self.held = held
        self._apply()

    def release(self) -> None:
        """Read again, whatever was asked: the connection leaves HTTP."""
        self.held, self.wanted = False, True
        FlowControl.resume_reading(self)

    def _apply(self) -> None:
        if self.wanted and not self.held:
            FlowControl.resume_reading(self)
        else:
            FlowControl.pause_reading(self)


class GuardedHttpProtocol(HttpToolsProtocol):
    header_timeout_s: float = 10.0
    max_header_bytes: int = 64 << 10
    write_stall_s: float = 20.0
    """Set per server by :func:`http_protocol`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._stall_timer: asyncio.TimerHandle | None = None
        self._unparsed = b""
        self._offset = 0
        self._feeding = False
        self._feed_scheduled = False
        self._in_head = False
        self._head_bytes = 0
        """The request's target, header names and values with their separators."""
        self._head_fed = 0
        """Bytes parsed while in the request's head: at most one slice more than it."""
        self._in_trailers = False
        """After a chunk's size line and before its data: the trailers, after the last."""
        self._trailer_bytes = 0
        self._trailer_fed = 0
        self._head_error: str | None = None
        """Why the parser was stopped in a request's head (too large)."""
        self._refusal: bytes | None = None
        """A 431 or 400 waiting for the answers before it to go out."""
        self._closing = False
        self._upgrade_waiting = False
        self._upgraded = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = HeldFlow(transport, self._schedule_feed)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        self._disarm_stall_timer()
        self._drop_unparsed()
        super().connection_lost(exc)

    # -- reading: a slice at a time, never far past the request being answered --

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return  # the rest of a refused request: read and dropped
        self._unparsed = self._unparsed[self._offset :] + data if self._unparsed else data
        self._offset = 0
        self._feed()

    def _schedule_feed(self) -> None:
        """Parse what is held from a callback of its own, never inside the application's
        ``send`` or ``receive`` (whose stack and exception context are not ours)."""
        if not self._feed_scheduled and self._has_unparsed():
            self._feed_scheduled = True
            self.loop.call_soon(self._scheduled_feed)

    def _scheduled_feed(self) -> None:
        self._feed_scheduled = False
        self._feed()

    def _feed(self) -> None:
        if self._feeding or self.parser is None or self._done_with_http():
            return
        self._feeding = True
        try:
            while self._has_unparsed() and not self.pipeline and self.flow.wanted:
                if self.transport.is_closing():
                    break
                end = min(self._offset + PARSE_SLICE, len(self._unparsed))
                piece = memoryview(self._unparsed)[self._offset : end]
                self._offset = end
                self._unset_keepalive_if_required()
                if not self._parse(piece):
                    return
                if self._in_head:
                    self._head_fed += len(piece)
                    if self._head_fed > self.max_header_bytes + PARSE_SLICE:
                        self._refuse_headers(f"more than {self._head_fed} bytes")
                        return
                elif self._in_trailers:
                    self._trailer_fed += len(piece)
                    if self._trailer_fed > self.max_header_bytes + PARSE_SLICE:
                        self._refuse_trailers(f"more than {self._trailer_fed} bytes")
                        return
        finally:
            self._feeding = False
        if not self._has_unparsed():
            self._drop_unparsed()
        if not self._done_with_http():
            self.flow.hold(self._has_unparsed())

    def _done_with_http(self) -> bool:
        """Refused, upgraded, or about to upgrade: parse nothing more."""
        return self._closing or self._upgrade_waiting or self._upgraded

    def _has_unparsed(self) -> bool:
        return self._offset < len(self._unparsed)

    def _drop_unparsed(self) -> None:
        self._unparsed, self._offset = b"", 0

    def _answers_pending(self) -> bool:
        cycle = self.cycle
        running = cycle is not None and not cycle.response_complete and not cycle.disconnected
        return bool(self.pipeline) or running

    def _parse(self, piece: memoryview) -> bool:
        """Feed one slice; False when the connection is done with HTTP (an upgrade,
        a refusal or a malformed request)."""
        try:
            self.parser.feed_data(piece)
        except httptools.HttpParserUpgrade:
            self._drop_unparsed()  # as uvicorn: what follows the handshake is not read
            if not self._should_upgrade():
                self._unsupported_upgrade_warning()
            elif self._answers_pending():
                # Pipelined behind answers still going out: upgrade once they are out,
                # or the 101 could overtake them.
                self._upgrade_waiting = True
                self.flow.hold(True)
            else:
                self._upgrade()
            return False
        except httptools.HttpParserError:
            self._drop_unparsed()
            if self._head_error is not None and self._in_trailers:
                self._refuse_trailers(self._head_error)
            elif self._head_error is not None:
                self._refuse_headers(self._head_error)
            else:
                self.logger.warning("Invalid HTTP request received.")
                self._refuse(_BAD_REQUEST)
            return False
        return True

    def _upgrade(self) -> None:
        self._upgrade_waiting = False
        self._upgraded = True
        self._disarm_stall_timer()
        self.flow.release()  # the WebSocket protocol reads from here on
        self.handle_websocket_upgrade()

    # -- parser callbacks: count the head --

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = self._head_fed = 0
        self._in_trailers = False
        self._arm_header_timer()
        set_abort(self.scope, self._abort)  # type: ignore[arg-type]

    def on_url(self, url: bytes) -> None:
        self._head_bytes += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        size = len(name) + len(value) + 4  # ": " and CRLF
        if self._in_head:
            self._head_bytes += size
        else:  # a trailer, after a chunked body: the same limit, all of them together
            self._trailer_bytes += size
            if self._trailer_bytes > self.max_header_bytes:
                self._head_error = f"trailers of {self._trailer_bytes} bytes"
                raise HeadersTooLarge(self._head_error)  # stops the parser
        super().on_header(name, value)

    def on_chunk_header(self) -> None:
        self._in_trailers = True  # until data arrives: only the last chunk has none
        self._trailer_fed = self._trailer_bytes = 0

    def on_body(self, body: bytes) -> None:
        self._in_trailers = False
        super().on_body(body)

    def on_chunk_complete(self) -> None:
        self._in_trailers = False

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm_header_timer()
        self._head_error = self._head_too_large()
        if self._head_error is not None:
            raise HeadersTooLarge(self._head_error)  # stops the parser
        super().on_headers_complete()

    def _head_too_large(self) -> str | None:
        if self._head_bytes > self.max_header_bytes:
            return f"{self._head_bytes} bytes"
        if not (self.parser.should_upgrade() and self._should_upgrade()):
            return None
        # The WebSocket library reads the handshake again, at most MAX_NUM_HEADERS
        # headers of at most MAX_LINE_LENGTH bytes a line, and hangs up without an
        # answer past either.
        if len(self.headers) > MAX_NUM_HEADERS:
            return (
                f"{len(self.headers)} headers in a WebSocket handshake, more than the"
                f" {MAX_NUM_HEADERS} allowed"
            )
        longest = max((len(n) + len(v) + 4 for n, v in self.headers), default=0)
        request_line = len(self.parser.get_method()) + len(self.url) + 12  # "M <url> HTTP/1.1"
        longest = max(longest, request_line)
        if longest > MAX_LINE_LENGTH:
            return (
                f"a WebSocket handshake line of {longest} bytes, more than the"
                f" {MAX_LINE_LENGTH} allowed (8 KiB per line)"
            )
        return None

    def on_response_complete(self) -> None:
        super().on_response_complete()  # starts the next request waiting, if any
        if self.transport.is_closing():
            return
        if self._refusal is None and not self._upgrade_waiting:
            self._schedule_feed()
        elif not self._answers_pending():
            self._unset_keepalive_if_required()
            if self._refusal is not None:
                self._send_and_linger(self._refusal)
            else:
                self._upgrade()

    # -- refusals --

    def _refuse_headers(self, what: str) -> None:
        self._disarm_header_timer()
        message = (
            f"request headers too large: {what}; at most {self.max_header_bytes} bytes of"
            " request target and headers are read (Limits.max_header_bytes, set with"
            " --limit max_header_bytes=N)"
        )
        body = json.dumps(
            {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": None,
                    "code": HEADERS_TOO_LARGE,
                }
            }
        ).encode()
        self._refuse(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n"
            b"connection: close\r\n\r\n" + body
        )

    def _refuse_trailers(self, what: str) -> None:
        """Trailers too large come while their request runs: the application is told
        its client left, and the 431 goes out now if it has not answered yet."""
        cycle = self.cycle
        answering = cycle is not None and cycle.response_started and not cycle.response_complete
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
        if answering:
            self._drop_unparsed()
            self._closing = True
            self._abort()
        else:
            self._refuse_headers(what)

    def _refuse(self, response: bytes) -> None:
        """Send ``response`` once the answers before it are out, then close."""
        self._drop_unparsed()
        self._closing = True  # parse nothing more
        if self._answers_pending():
            self._refusal = response
            self.flow.hold(True)
        else:
            self._send_and_linger(response)

    def _send_and_linger(self, response: bytes) -> None:
        """Answer, end our side, and drop what the client still sends for a moment:
        closing with unread bytes would reset the connection and lose the answer."""
        self._refusal = None
        self._closing = True
        self.transport.write(response)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.flow.release()
        self.loop.call_later(LINGER_S, self.transport.close)

    # -- timers --

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._has_unparsed() or self.pipeline:
            # The head is here, unparsed because an answer is still going out: the
            # wait is ours, not the client's.
            self._arm_header_timer()
            return
        if not self.transport.is_closing():
            self.transport.write(_TIMEOUT_RESPONSE)
            self.transport.close()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall_timer is None:
            self._stall_timer = self.loop.call_later(self.write_stall_s, self._write_stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._disarm_stall_timer()

    def _disarm_stall_timer(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _write_stalled(self) -> None:
        self._stall_timer = None
        log.info("reset an HTTP connection whose client read nothing for %g s", self.write_stall_s)
        self._abort()

    def _abort(self) -> None:
        abort(self.transport)


class TextDeflate(PerMessageDeflate):
    """permessage-deflate that compresses text messages and sends binary ones as they
    are (RSV1 clear: RFC 7692 lets a sender leave any message uncompressed, and the
    receiver's window only advances over the compressed ones, as ours does)."""

    _binary_open = False
    """Inside a fragmented binary message: its continuation frames go out as they are."""

    def encode(self, frame: Frame) -> Frame:
        if frame.opcode is BINARY or (frame.opcode is CONT and self._binary_open):
            self._binary_open = not frame.fin
            return frame
        return super().encode(frame)


class TextDeflateFactory(ServerPerMessageDeflateFactory):
    """The negotiation of :class:`ServerPerMessageDeflateFactory` (same parameters),
    answering with a :class:`TextDeflate`."""

    def process_request_params(
        self, params: Any, accepted_extensions: Any
    ) -> tuple[list[tuple[str, str | None]], PerMessageDeflate]:
        response, ext = super().process_request_params(params, accepted_extensions)
        text_only = TextDeflate(
            ext.remote_no_context_takeover,
            ext.local_no_context_takeover,
            ext.remote_max_window_bits,
            ext.local_max_window_bits,
            ext.compress_settings,
        )
        return response, text_only


def text_deflate(factories: list[ServerExtensionFactory]) -> list[ServerExtensionFactory]:
    """``factories`` with permessage-deflate's replaced by :class:`TextDeflateFactory`
    of the same settings (uvicorn's: 12-bit windows, memLevel 5)."""
    out: list[ServerExtensionFactory] = []
    for factory in factories:
        if isinstance(factory, ServerPerMessageDeflateFactory):
            factory = TextDeflateFactory(
                factory.server_no_context_takeover,
                factory.client_no_context_takeover,
                factory.server_max_window_bits,
                factory.client_max_window_bits,
                factory.compress_settings,
                factory.require_client_max_window_bits,
            )
        out.append(factory)
    return out


class GuardedWebSocketProtocol(WebSocketsSansIOProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn.available_extensions = text_deflate(list(self.conn.available_extensions or []))

    async def send(self, message: Any) -> None:
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body"):
            # The handshake was answered (a refusal). uvicorn leaves this unset and then
            # logs "ASGI callable returned without completing handshake" for every one.
            self.handshake_complete = True

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:  # None: the handshake was refused before a scope existed
            set_abort(scope, self._abort)  # type: ignore[arg-type]

    def _abort(self) -> None:
        abort(self.transport)


def abort(transport: asyncio.Transport) -> None:
    """Reset the connection: the bytes our socket still holds are discarded too.

    ``transport.abort()`` alone drops only the transport's own buffer; the
    kernel would keep trying to deliver its send buffer (megabytes) to a client
    that reads nothing. A zero linger time makes the close a reset.
    """
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass  # already closed
    transport.abort()


def http_protocol(
    header_timeout_s: float, max_header_bytes: int = 64 << 10, write_stall_s: float = 20.0
) -> type[GuardedHttpProtocol]:
    """The HTTP protocol class for a server with these limits."""
    return type(
        "HttpProtocol",
        (GuardedHttpProtocol,),
        {
            "header_timeout_s": float(header_timeout_s),
            "max_header_bytes": int(max_header_bytes),
            "write_stall_s": float(write_stall_s),
        },
    )
