"""Malformed credentials are 401s, and refusals cannot flood the log, against a server process.

The attack (issue: hardening round two, hole 8): ``?token=%C2%B2.a.b`` ("²" passes
``str.isdigit``, which ``int`` refuses) and a token whose expiry has 5,000 digits
(``int`` refuses strings over 4,300 digits) were each an unauthenticated 500 with a
3.4 KB traceback in the log; the vllm-omni socket logged a warning for every refused
message (38.5 MB of log in 10 s).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import websockets

from bench.spawn import SpawnedServer, spawn_server

KEY = "refusals-key"
BAD_TOKENS = (
    "%C2%B2.a.b",
    "9" * 5000 + ".nonce." + "0" * 64,
    "1" * 13 + ".nonce." + "0" * 64,
    "%00.%00.%00",
    "1.a.b.c",
    "%F0%9F%98%80." * 3,
)


@pytest.fixture(scope="module")
def server() -> Iterator[SpawnedServer]:
    # The vllm socket's refusals are logged at WARNING: the server's own log level.
    with spawn_server("tiny", args=("--api-key", KEY), start_timeout_s=120) as running:
        yield running


@pytest.mark.parametrize("path", ["/v1/audio/speech/ws", "/v1/audio/speech/stream"])
async def test_malformed_tokens_are_401(server: SpawnedServer, path: str) -> None:
    base = server.url.replace("/v1/audio/speech/ws", path)
    before = server.log_path.stat().st_size
    for token in BAD_TOKENS:
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(f"{base}?token={token}")
        assert refused.value.response.status_code == 401, token
        assert b"unauthorized" in refused.value.response.body
    log = server.log_path.read_bytes()[before:]
    assert b"Traceback" not in log and len(log) < 4096, log[-2000:]


async def test_refused_vllm_messages_are_logged_a_few_times(server: SpawnedServer) -> None:
    """Ten seconds' worth of a client's refused messages add a few lines to the log
    (the messages themselves are refused within the client's rate budget)."""
    url = server.url.replace("/ws", "/stream")
    headers = {"authorization": f"Bearer {KEY}"}
    before = server.log_path.stat().st_size
    refused = 0
    deadline = time.monotonic() + 3
    async with websockets.connect(url, additional_headers=headers) as ws:
        await ws.send('{"type": "session.config"}')
        while time.monotonic() < deadline:
            for _ in range(50):  # within the default budget of 500 a second
                await ws.send('{"type": "input.text", "text": 5}')
            for _ in range(50):
                reply = await asyncio.wait_for(ws.recv(), 10)
                refused += '"error"' in str(reply)
            await asyncio.sleep(0.1)
    grown = server.log_path.stat().st_size - before
    assert refused > 500
    assert grown < 4096, server.log_path.read_bytes()[before:][-2000:]
