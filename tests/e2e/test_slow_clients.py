"""Clients that stop reading, read slowly or leave are dropped, and their work freed.

Each test failed before the hardening: a never-reading socket kept its contexts
forever (the 1008 waited behind the unsendable buffer), JSON replies were not
counted in the session budget, an HTTP body nobody read held its context and its
audio indefinitely, and an abandoned batch ran to its end.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
import websockets

from tests.serving import RunningServer, run_server
from voiceserver.config import Limits, ServerConfig, load_model_config

LIMITS = Limits(
    max_contexts=4,
    max_text_chars=20_000,
    max_batch_text_chars=32 * 20_000,  # the abandoned batch: 32 long items
    max_message_bytes=64 * 1024,
    outbox_max_bytes=2 << 20,
    slow_reader_timeout_s=1.0,
    stream_ahead_s=5.0,
)
LONG_TEXT = "many words " * 1800  # ~20,000 bytes: 400 s of the tiny model's audio
F32_48K = {"encoding": "pcm_f32le", "sample_rate": 48000}  # 192 KB of audio per second


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with run_server(load_model_config("tiny"), ServerConfig(limits=LIMITS)) as running:
        yield running


async def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.05)


def idle(server: RunningServer) -> Callable[[], bool]:
    rt = server.runtime
    return lambda: rt.engine.snapshot().active_contexts == 0 and rt.sessions_open == 0


@pytest.fixture
def errors_logged(caplog: pytest.LogCaptureFixture) -> Callable[[], list[logging.LogRecord]]:
    caplog.set_level(logging.WARNING)
    return lambda: [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def test_a_socket_that_never_reads_is_dropped_and_its_contexts_freed(
    server: RunningServer, errors_logged: Callable[[], list[logging.LogRecord]]
) -> None:
    # max_queue=1: the client library stops reading the socket, so TCP pushes back.
    ws = await websockets.connect(server.ws, max_queue=1, max_size=None)
    for i in range(LIMITS.max_contexts):
        create = {"type": "context.create", "context_id": f"c{i}", "output_format": F32_48K}
        await ws.send(json.dumps(create))
        await ws.send(json.dumps({"type": "text.append", "context_id": f"c{i}", "text": LONG_TEXT}))
        await ws.send(json.dumps({"type": "context.end", "context_id": f"c{i}"}))
    await wait_until(
        lambda: server.runtime.engine.snapshot().active_contexts > 0, 10, "contexts run"
    )
    await wait_until(idle(server), 20, "the session is dropped and its contexts freed")
    await ws.close()
    assert errors_logged() == []


async def test_json_replies_count_toward_the_budget(server: RunningServer) -> None:
    """A client that sends small requests with big answers and never reads is dropped;
    before, 300 session.update echoes of 900 KB queued 270 MB."""
    ws = await websockets.connect(server.ws, max_queue=1, max_size=None)
    update = json.dumps(
        {"type": "session.update", "instructions": "calm and slow " * 700, "event_id": "e" * 256}
    )
    sent = 0
    try:
        while sent < 4000 and server.runtime.sessions_open:  # ~40 MB of replies unstopped
            await ws.send(update)
            sent += 1
    except websockets.ConnectionClosed:
        pass
    await wait_until(idle(server), 20, "the flooding session is dropped")
    assert sent < 4000
    await ws.close()


async def test_a_slow_reader_is_cut_with_1008_not_1011(
    server: RunningServer, errors_logged: Callable[[], list[logging.LogRecord]]
) -> None:
    ws = await websockets.connect(server.ws, max_queue=4, max_size=None)
    for i in range(2):
        create = {"type": "context.create", "context_id": f"s{i}", "output_format": F32_48K}
        await ws.send(json.dumps(create))
        await ws.send(json.dumps({"type": "text.append", "context_id": f"s{i}", "text": LONG_TEXT}))
    received: list[dict[str, object]] = []
    with pytest.raises(websockets.ConnectionClosed) as closed:
        async with asyncio.timeout(60):
            while True:
                message = await ws.recv()
                if isinstance(message, str):
                    received.append(json.loads(message))
                await asyncio.sleep(0.05)  # reads, but far slower than audio arrives
    codes = {m.get("code") for m in received if m["type"] == "error"}
    assert "internal_error" not in codes
    rcvd = closed.value.rcvd
    assert rcvd is None or rcvd.code == 1008, rcvd  # 1008 slow_reader, or the abort
    await wait_until(idle(server), 20, "the slow session's contexts are freed")
    assert errors_logged() == []


def raw_post(server: RunningServer, path: str, body: dict[str, object]) -> socket.socket:
    """Send a whole POST and never read the answer."""
    data = json.dumps(body).encode()
    sock = socket.create_connection((server.host, server.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {server.host}:{server.port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
    )
    sock.sendall(head.encode() + data)
    return sock


async def test_an_unread_http_body_is_dropped_and_its_context_freed(
    server: RunningServer, errors_logged: Callable[[], list[logging.LogRecord]]
) -> None:
    rt = server.runtime
    body = {"input": LONG_TEXT, "response_format": "wav", "sample_rate": 48000}
    sock = raw_post(server, "/v1/audio/speech", body)
    try:
        await wait_until(lambda: rt.engine.snapshot().active_contexts > 0, 10, "the request runs")
        await wait_until(
            lambda: rt.engine.snapshot().active_contexts == 0 and rt.lifecycle.busy == 0,
            20,
            "the unread response is dropped and its context freed",
        )
        # The connection was aborted: reading what arrived ends in EOF or a reset.
        sock.settimeout(10)
        with pytest.raises((ConnectionResetError, AssertionError)):
            while True:
                assert sock.recv(1 << 16)
    finally:
        sock.close()
    assert errors_logged() == []


async def test_an_abandoned_batch_is_freed_at_once(server: RunningServer) -> None:
    rt = server.runtime
    items = [{"input": LONG_TEXT} for _ in range(LIMITS.max_batch_items)]
    async with httpx.AsyncClient(base_url=server.http) as http:
        request = asyncio.create_task(
            http.post("/v1/audio/speech/batch", json={"items": items}, timeout=120)
        )
        await wait_until(
            lambda: rt.engine.snapshot().active_contexts >= LIMITS.max_batch_items // 2,
            20,
            "the batch runs",
        )
        request.cancel()  # the client goes away: its connection closes
        with pytest.raises(asyncio.CancelledError):
            await request
        left_at = time.monotonic()
        await wait_until(lambda: rt.engine.snapshot().active_contexts == 0, 5, "the batch is freed")
        assert time.monotonic() - left_at < 5
    await wait_until(lambda: rt.lifecycle.busy == 0, 5, "the request is over")


async def test_a_client_leaving_before_the_first_audio_cancels_the_request(
    server: RunningServer,
) -> None:
    rt = server.runtime
    sock = raw_post(server, "/v1/audio/speech", {"input": LONG_TEXT, "response_format": "mp3"})
    await wait_until(lambda: rt.engine.snapshot().active_contexts > 0, 10, "the request runs")
    sock.close()
    await wait_until(
        lambda: rt.engine.snapshot().active_contexts == 0 and rt.lifecycle.busy == 0,
        5,
        "the abandoned request is freed",
    )
