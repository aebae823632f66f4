"""Policy: keys stay out of logs and URLs, foreign web pages are refused, and
ordinary departures leave no tracebacks.

Before the hardening the API key appeared in the access log whenever ``?token=``
was used (and ``?token=`` worked on HTTP too); with no key set, any web page could
drive the local server's sockets and upload voices (no Origin check); and ordinary
client departures logged "session writer failed" and ``ClientDisconnect`` tracebacks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Iterator

import httpx
import pytest
import websockets

from tests.serving import RunningServer, run_server
from tests.wsclient import Client
from voiceserver.config import ServerConfig, load_model_config

KEY = "k3y-that-must-not-leak"
ALLOWED = "https://app.example"


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def text(self) -> str:
        return "\n".join(self.format(r) for r in self.records)


@pytest.fixture(scope="module")
def logs(server: RunningServer) -> Iterator[Collect]:
    """Every record of the server's loggers (installed once the server has configured them)."""
    handler = Collect()
    loggers = [logging.getLogger(n) for n in ("", "uvicorn", "uvicorn.error", "uvicorn.access")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    config = ServerConfig(api_keys=(KEY,), allowed_origins=(ALLOWED,))
    with run_server(load_model_config("tiny"), config, log_level="info") as running:
        yield running


def auth() -> dict[str, str]:
    return {"authorization": f"Bearer {KEY}"}


async def test_query_token_works_on_websockets_and_is_masked_in_the_log(
    server: RunningServer, logs: Collect
) -> None:
    client = await Client.connect(f"{server.ws}?token={KEY}&voice=tiny-a")
    await client.send(type="text.append", context_id="t", text="hi")
    await client.send(type="context.end", context_id="t")
    await client.until("context.done", "t")
    await client.close()
    await asyncio.sleep(0.2)
    assert "token=***" in logs.text()
    assert KEY not in logs.text()


def test_query_token_is_refused_on_http(server: RunningServer, logs: Collect) -> None:
    with httpx.Client(base_url=server.http, timeout=30) as http:
        refused = http.post(f"/v1/audio/speech?token={KEY}", json={"input": "hi"})
        assert refused.status_code == 401
        assert http.post("/v1/audio/speech", json={"input": "hi"}, headers=auth()).is_success
    assert KEY not in logs.text()


async def test_foreign_origins_are_refused_before_the_upgrade(server: RunningServer) -> None:
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(
            f"{server.ws}?token={KEY}", additional_headers={"origin": "https://evil.example"}
        )
    assert refused.value.response.status_code == 403
    assert b"origin_not_allowed" in refused.value.response.body
    for origin in (ALLOWED, f"http://{server.host}:{server.port}"):
        client = await Client.connect(
            f"{server.ws}?token={KEY}", additional_headers={"origin": origin}
        )
        await client.close()


def test_foreign_origins_cannot_upload_voices_or_speak(server: RunningServer) -> None:
    """A multipart POST needs no CORS preflight: the Origin check is what stops it."""
    evil = {**auth(), "origin": "http://localhost:9999"}
    with httpx.Client(base_url=server.http, timeout=30) as http:
        upload = http.post(
            "/v1/audio/voices",
            headers=evil,
            data={"name": "stolen"},
            files={"audio_sample": ("a.wav", b"RIFF....WAVE", "audio/wav")},
        )
        assert upload.status_code == 403
        assert upload.json()["error"]["code"] == "origin_not_allowed"
        speak = http.post("/v1/audio/speech", headers=evil, json={"input": "hi"})
        assert speak.status_code == 403
        ok = http.post(
            "/v1/audio/speech", headers={**auth(), "origin": ALLOWED}, json={"input": "hi"}
        )
        assert ok.is_success


def test_an_open_server_still_refuses_foreign_pages() -> None:
    """No key configured (the default): a web page must not drive the local server."""
    with (
        run_server(load_model_config("tiny")) as open_server,
        httpx.Client(base_url=open_server.http, timeout=30) as http,
    ):
        assert http.post("/v1/audio/speech", json={"input": "hi"}).is_success
        foreign = http.post(
            "/v1/audio/speech", json={"input": "hi"}, headers={"origin": "https://evil.example"}
        )
        assert foreign.status_code == 403


async def test_ordinary_departures_log_no_tracebacks(server: RunningServer, logs: Collect) -> None:
    before = len(logs.records)
    # A WebSocket client that vanishes mid-audio.
    ws = await websockets.connect(f"{server.ws}?token={KEY}", max_size=None)
    await ws.send(json.dumps({"type": "text.append", "context_id": "x", "text": "long " * 2000}))
    await ws.recv()
    await ws.recv()
    ws.transport.abort()  # type: ignore[attr-defined]
    # An HTTP client that leaves halfway through its body, and one that leaves mid-answer.
    for request in (
        b"POST /v1/audio/speech HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer "
        + KEY.encode()
        + b'\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{"input": ',
        b"POST /v1/audio/speech HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer "
        + KEY.encode()
        + b'\r\ncontent-type: application/json\r\ncontent-length: 33\r\n\r\n{"input": "'
        + b"word " * 4
        + b'"}',
    ):
        sock = socket.create_connection((server.host, server.port))
        sock.sendall(request)
        await asyncio.sleep(0.3)
        sock.close()
    await asyncio.sleep(1.0)
    new = logs.records[before:]
    bad = [r for r in new if r.exc_info or r.levelno >= logging.ERROR]
    assert bad == [], "\n".join(logs.format(r) for r in bad)
