"""Shutdown and slow requests: SIGTERM drains within its deadline; slowloris is cut.

Before the hardening, SIGTERM cut WebSocket contexts with 1012 and no
``context.done``, error or final-frame flag; one HTTP client that never read
kept the process alive 30 s after SIGTERM; and twenty half-sent requests were
still open after three minutes (no header timeout).
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time

import pytest
import websockets

from bench.spawn import spawn_server
from tests.serving import run_server
from voiceserver.config import Limits, ServerConfig, load_model_config

SHUTDOWN_S = 2.0
EXIT_MARGIN_S = 8.0
"""Start-up of the drain, farewells and uvicorn's own teardown, on a loaded CI machine."""


async def test_sigterm_finishes_what_it_can_cuts_the_rest_and_exits() -> None:
    args = (
        "--shutdown-timeout",
        str(SHUTDOWN_S),
        "--limit",
        "slow_reader_timeout_s=30",  # the unread HTTP body must be cut by the drain itself
    )
    with spawn_server("tiny", args=args, start_timeout_s=120) as server:
        assert server.process is not None
        ws = await websockets.connect(server.url, max_size=None)
        assert json.loads(await ws.recv())["type"] == "session.created"
        # A context whose text is all there but still open: it can finish in the drain.
        await ws.send(json.dumps({"type": "text.append", "context_id": "short", "text": "Bye."}))
        # A context far longer than the drain (the engine paces it at real time).
        long_text = "a long story " * 1000
        await ws.send(json.dumps({"type": "text.append", "context_id": "long", "text": long_text}))
        await ws.send(json.dumps({"type": "context.end", "context_id": "long"}))
        # An HTTP client that never reads its (long) answer.
        host, port = server.http.removeprefix("http://").split(":")
        body = json.dumps({"input": long_text, "response_format": "wav"}).encode()
        lazy = socket.create_connection((host, int(port)))
        lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        lazy.sendall(
            b"POST /v1/audio/speech HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await asyncio.sleep(1.0)  # both are under way

        server.process.send_signal(signal.SIGTERM)
        sent_at = time.monotonic()
        await ws.send(json.dumps({"type": "context.end", "context_id": "short"}))
        messages: list[dict[str, object]] = []
        with pytest.raises(websockets.ConnectionClosed) as closed:
            async with asyncio.timeout(SHUTDOWN_S + EXIT_MARGIN_S):
                while True:
                    data = await ws.recv()
                    if isinstance(data, str):
                        messages.append(json.loads(data))
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012
        done = [m["context_id"] for m in messages if m["type"] == "context.done"]
        cut = [
            m.get("context_id")
            for m in messages
            if m["type"] == "error" and m["code"] == "server_shutdown"
        ]
        assert done == ["short"]
        assert cut == ["long"]
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, server.process.wait, SHUTDOWN_S + EXIT_MARGIN_S)
        assert time.monotonic() - sent_at < SHUTDOWN_S + EXIT_MARGIN_S
        lazy.close()
        log = server.log_path.read_text(errors="replace")
        assert "Traceback" not in log, log


async def test_new_work_is_refused_while_draining() -> None:
    with spawn_server("tiny", args=("--shutdown-timeout", "5"), start_timeout_s=120) as server:
        assert server.process is not None
        ws = await websockets.connect(server.url, max_size=None)
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": "Hold on "}))
        await asyncio.sleep(0.5)
        server.process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.5)
        await ws.send(json.dumps({"type": "context.create", "context_id": "b", "event_id": "new"}))
        error: dict[str, object] = {"type": None}
        while error["type"] != "error":
            data = await asyncio.wait_for(ws.recv(), 10)
            if isinstance(data, str):
                error = json.loads(data)
        assert (error["code"], error["context_id"], error["fatal"]) == (
            "server_shutdown",
            "b",
            False,
        )
        await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
        kinds = []
        with pytest.raises(websockets.ConnectionClosed) as closed:
            async with asyncio.timeout(10):
                while True:
                    data = await ws.recv()
                    if isinstance(data, str):
                        kinds.append(json.loads(data)["type"])
        assert "context.done" in kinds
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012


async def test_half_sent_requests_are_closed_after_the_header_deadline() -> None:
    limits = Limits(http_header_timeout_s=1.0)
    with run_server(load_model_config("tiny"), ServerConfig(limits=limits)) as server:
        sockets = []
        for i in range(20):
            sock = socket.create_connection((server.host, server.port))
            if i % 2:  # half send part of a request, half send nothing at all
                sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-le")
            sock.settimeout(10)
            sockets.append(sock)
        loop = asyncio.get_running_loop()
        answers = await asyncio.gather(
            *(loop.run_in_executor(None, _read_all, sock) for sock in sockets)
        )
        for answer in answers:
            assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        # A complete request on a fresh connection is served as usual.
        with socket.create_connection((server.host, server.port)) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
            sock.settimeout(10)
            assert _read_all(sock).startswith(b"HTTP/1.1 200")


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    finally:
        sock.close()
    return data
