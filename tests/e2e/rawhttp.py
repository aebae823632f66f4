"""HTTP over a bare socket, for requests no HTTP library will send: any Host header
(or none), HTTP/1.0, pipelined requests, headers of any size, WebSocket handshakes."""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import threading
from dataclasses import dataclass
from typing import Any


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    """Lower-cased names; a repeated header keeps its last value."""
    body: bytes
    closed: bool
    """The server closed the connection within 5 s of this answer (EOF or reset);
    only looked at when asked (``check_closed``), else False."""

    def json(self) -> Any:
        return json.loads(self.body)


def connect(host: str, port: int, timeout: float = 30.0) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def head(
    method: str,
    path: str,
    headers: list[tuple[str, str]],
    version: str = "HTTP/1.1",
) -> bytes:
    lines = [f"{method} {path} {version}", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class Reader:
    """The answers on one connection, in order (one buffer for all of them, so
    pipelined answers are not lost to a read-ahead)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.file = sock.makefile("rb")

    def makefile(self, *_: Any, **__: Any) -> Any:
        return _Shared(self.file)  # what http.client.HTTPResponse reads from (and closes)

    def answer(self, method: str = "GET", check_closed: bool = False) -> Answer:
        response = http.client.HTTPResponse(self, method=method)  # type: ignore[arg-type]
        response.begin()
        # A 101 has no body: reading one would wait for the end of the WebSocket stream.
        body = b"" if response.status == 101 else response.read()
        headers = {k.lower(): v for k, v in response.getheaders()}
        closed = check_closed and response.status != 101 and self._closed()
        return Answer(response.status, headers, body, closed)

    def _closed(self) -> bool:
        """Whether the server ends the connection within 5 s (reads one byte if not)."""
        self.sock.settimeout(5.0)
        try:
            return self.file.read(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


class _Shared:
    """A file that the response reading it may not close: the next answer needs it."""

    def __init__(self, file: Any) -> None:
        self._file = file

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    def close(self) -> None:
        pass


def read_answer(sock: socket.socket, method: str = "GET", check_closed: bool = False) -> Answer:
    """One response on a fresh connection (and whether the server then closes it)."""
    return Reader(sock).answer(method, check_closed)


def exchange(
    host: str,
    port: int,
    data: bytes,
    method: str = "GET",
    check_closed: bool = False,
) -> Answer:
    """Send ``data`` on a fresh connection and read one answer. The bytes are sent from
    a thread, so a server that answers (and closes) before taking them all is seen."""
    sock = connect(host, port)
    try:
        sender = threading.Thread(target=_send_all, args=(sock, data), daemon=True)
        sender.start()
        answer = read_answer(sock, method, check_closed)
        sender.join(30)
        return answer
    finally:
        sock.close()


def _send_all(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass  # the server answered and closed before taking everything


def websocket_handshake(
    path: str, host: str | None, extra: list[tuple[str, str]] | None = None
) -> bytes:
    headers = [] if host is None else [("Host", host)]
    headers += [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", base64.b64encode(os.urandom(16)).decode()),
        ("Sec-WebSocket-Version", "13"),
        *(extra or []),
    ]
    return head("GET", path, headers)
