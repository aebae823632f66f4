"""uvicorn's HTTP and WebSocket protocols with the guards a public server needs.

- A header deadline: a connection must finish each request's headers within
  ``header_timeout_s`` of opening (or of the request's first byte on a kept-alive
  connection), else it gets 408 and is closed. uvicorn itself waits forever, so
  twenty half-sent requests (slowloris) would hold twenty connections for good.
- An ``abort`` hook in every request's and WebSocket's scope
  (:mod:`voiceserver.transport.connection`), so the application can drop a
  client that stopped reading instead of waiting behind its unsent bytes.

These subclass uvicorn's httptools and websockets-sansio protocols (the ones
uvicorn[standard] picks); pyproject pins uvicorn's minor version because they
rely on its hooks (``on_message_begin``, ``on_headers_complete``,
``handle_connect``). The tests exercise both guards over real sockets.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from voiceserver.transport.connection import set_abort

_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 43\r\nconnection: close\r\n\r\n"
    b"request headers did not arrive in time\r\n\r\n\r\n"
)


class GuardedHttpProtocol(HttpToolsProtocol):
    header_timeout_s: float = 10.0
    """Set per server by :func:`http_protocol`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_header_timer()
        set_abort(self.scope, self._abort)  # type: ignore[arg-type]

    def on_headers_complete(self) -> None:
        self._disarm_header_timer()
        super().on_headers_complete()

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.write(_TIMEOUT_RESPONSE)
            self.transport.close()

    def _abort(self) -> None:
        abort(self.transport)


class GuardedWebSocketProtocol(WebSocketsSansIOProtocol):
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


def http_protocol(header_timeout_s: float) -> type[GuardedHttpProtocol]:
    """The HTTP protocol class for a server with this header deadline."""
    return type(
        "HttpProtocol", (GuardedHttpProtocol,), {"header_timeout_s": float(header_timeout_s)}
    )
