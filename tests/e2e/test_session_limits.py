"""Idle sessions and readers that fall behind are closed with the documented codes."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import websockets

from tests.serving import RunningServer, run_server
from tests.wsclient import Client
from voiceserver.config import Limits, ServerConfig, load_model_config


async def test_idle_session_closes_4008(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    await client.send(type="session.update", idle_timeout_s=0.5)
    await client.until("session.updated")
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await client.until("never", timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4008


async def test_keepalive_keeps_session_open(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    await client.send(type="session.update", idle_timeout_s=1.5)
    await client.until("session.updated")
    for _ in range(8):  # 2.4 s in all: longer than the timeout, kept alive throughout
        await asyncio.sleep(0.3)
        await client.send(type="keepalive")
    # Still open: a context works.
    await client.send(type="text.append", context_id="k", text="alive")
    await client.send(type="context.end", context_id="k")
    await client.until("context.done", "k")
    await client.close()


async def test_slow_reader_closed_1008_and_other_sessions_unharmed() -> None:
    model = load_model_config("tiny")
    model = dataclasses.replace(model, engine=dataclasses.replace(model.engine, max_lead_s=1e6))
    # The queue limit, not the send deadline, drops it: a client that reads again
    # within the deadline still gets its 1008 and the reason.
    limits = Limits(max_text_chars=50_000, outbox_max_bytes=128 * 1024, slow_reader_timeout_s=5)
    with run_server(model, ServerConfig(limits=limits)) as server:
        # max_queue=1: the client library stops reading the socket, so TCP pushes back.
        slow = await websockets.connect(server.ws, max_queue=1, max_size=None)
        for i in range(4):
            await slow.send(
                f'{{"type": "text.append", "context_id": "c{i}", "text": "{"many words " * 4000}"}}'
            )
            await slow.send(f'{{"type": "context.end", "context_id": "c{i}"}}')
        healthy = await Client.connect(server.ws)
        await healthy.send(type="text.append", context_id="h", text="I read my audio.")
        await healthy.send(type="context.end", context_id="h")
        done = await healthy.until("context.done", "h")
        assert done["audio_ms"] > 0
        await healthy.close()
        await asyncio.sleep(3)  # the slow reader's queue stays full past the timeout
        code = None
        try:
            async with asyncio.timeout(30):
                while True:
                    await slow.recv()
        except websockets.ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd else None
        assert code == 1008
