"""A few KB of text cannot take the server's memory or stall other streams.

Before the hardening, Piper synthesized a whole segment in one engine call, with
memory growing with the square of its phoneme count: ``"你" * 400`` over HTTP took
the server from 303 MB to 3.3 GB (kept after the request) and delayed other
sessions' first audio by 11-44 s; with a manual buffer and a flush there was no
cap at all (1,200 characters: over 15 GB). Now every segment is cut to a bounded
size (``max_chars``) and every Piper call to a bounded number of phoneme ids, and
the acoustic stage returns its memory after each call.

The server runs in its own process, so its peak RSS (VmHWM) is its own.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets

from bench.spawn import SpawnedServer, spawn_server
from tests.wsclient import Client

CJK = "你" * 1200  # ~20,000 phoneme ids with the English voice ("Chinese letter" each)
PEAK_GROWTH_MB = 600
"""Allowed peak RSS growth above the warmed-up server (it was 3-15 GB)."""


@pytest.fixture(scope="module")
def piper() -> Iterator[SpawnedServer]:
    with spawn_server("piper-joe", start_timeout_s=300) as server:
        yield server


def status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


async def bystander_finishes(server: SpawnedServer) -> None:
    client = await Client.connect(server.url)
    await client.send(type="text.append", context_id="b", text="Hello there, how are you today?")
    await client.send(type="context.end", context_id="b")
    done = await client.until("context.done", "b", timeout=120)
    assert done["audio_ms"] > 1000
    await client.close()


async def warm_up(server: SpawnedServer) -> float:
    await bystander_finishes(server)
    assert server.pid is not None
    return status_mb(server.pid, "VmRSS")


async def test_manual_flush_of_a_long_cjk_text(piper: SpawnedServer) -> None:
    assert piper.pid is not None
    base = await warm_up(piper)
    client = await Client.connect(piper.url)
    await client.send(type="context.create", context_id="big", buffer={"mode": "manual"})
    await client.send(type="text.append", context_id="big", text=CJK)
    await client.send(type="context.flush", context_id="big")
    await client.until_audio("big", timeout=120)
    # Another session is served while the long text is still being spoken.
    await bystander_finishes(piper)
    assert not client.got.of_type("context.flushed")
    peak = status_mb(piper.pid, "VmHWM")
    await client.send(type="context.cancel", context_id="big")
    await client.until("context.cancelled", "big")
    await client.close()
    assert peak - base < PEAK_GROWTH_MB, (base, peak)


async def test_http_request_of_a_long_cjk_text(piper: SpawnedServer) -> None:
    assert piper.pid is not None
    base = await warm_up(piper)
    async with (
        httpx.AsyncClient(base_url=piper.http, timeout=120) as http,
        http.stream(
            "POST", "/v1/audio/speech", json={"input": CJK[:400] * 3, "response_format": "pcm"}
        ) as response,
    ):
        assert response.status_code == 200
        body = response.aiter_bytes()
        assert await anext(body)  # the first piece arrived: the request is under way
        await bystander_finishes(piper)
        peak = status_mb(piper.pid, "VmHWM")
    # Leaving the request cancels it; the memory of its calls was returned.
    await asyncio.sleep(1.0)
    assert peak - base < PEAK_GROWTH_MB, (base, peak)
    assert status_mb(piper.pid, "VmRSS") - base < PEAK_GROWTH_MB / 2


async def test_vllm_socket_without_split_cuts_a_long_text(piper: SpawnedServer) -> None:
    """``split_granularity: none`` waits for ``input.done``, then speaks the text as
    sentences of bounded size, not as one unbounded segment."""
    assert piper.pid is not None
    base = await warm_up(piper)
    url = piper.url.replace("/v1/audio/speech/ws", "/v1/audio/speech/stream")
    async with websockets.connect(url, max_size=None) as ws:
        config = {"type": "session.config", "split_granularity": "none", "response_format": "pcm"}
        await ws.send(json.dumps(config | {"stream_audio": True}))
        await ws.send(json.dumps({"type": "input.text", "text": CJK}))
        await ws.send(json.dumps({"type": "input.done"}))
        start: dict[str, object] = {}
        async with asyncio.timeout(120):
            while not isinstance(data := await ws.recv(), bytes):  # until the first audio
                start = json.loads(data)
        peak = status_mb(piper.pid, "VmHWM")
    # Each sentence is one engine context, spoken in turn: the first is a bounded cut.
    assert start["type"] == "audio.start"
    assert 0 < len(str(start["sentence_text"])) <= 400
    assert peak - base < PEAK_GROWTH_MB, (base, peak)
