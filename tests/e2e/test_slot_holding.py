"""Contexts that say nothing cannot lock the engine, against a server in its own process.

The attack (issue: hardening round two, hole 2): two sockets opened as many
``context.create`` as their session allows and sent no text. Each context took an
engine slot at create and the idle timer counted open contexts as activity, so the
slots stayed taken for good: everyone else got 1013 / 503 at +1, +15, +45 s. Now a
context takes a slot only once it has something to speak; a context that receives
nothing and sends nothing for ``context_idle_timeout_s`` is ended; a socket that
receives nothing and sends no audio is closed after ``idle_timeout_s``; a socket
opened with a connect token closes (4001) when the token expires, after it has
finished what it was speaking; and one client holds at most ``max_client_share`` of
the engine's slots.

The attacker and the bystander hold different API keys: two clients, as two
customers would be (the attacker also connects from 127.0.0.2).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets

from bench.spawn import SpawnedServer, spawn_server
from tests.wsclient import Client

SLOTS = 8
"""Engine slots of the spawned tiny model."""
KEY = "slot-test-key"
ATTACKER_KEY = "attacker-key"
ATTACKER_ADDRESS = {"local_addr": ("127.0.0.2", 0)}
ATTACKER = {
    **ATTACKER_ADDRESS,
    "additional_headers": {"authorization": f"Bearer {ATTACKER_KEY}"},
}
LIMITS = (
    "--option",
    f"max_contexts={SLOTS}",
    "--limit",
    f"max_contexts={SLOTS}",
    "--limit",
    "idle_timeout_s=3",
    "--limit",
    "context_idle_timeout_s=2",
    "--api-key",
    KEY,
    "--api-key",
    ATTACKER_KEY,
)
AUTH = {"additional_headers": {"authorization": f"Bearer {KEY}"}}


@pytest.fixture(scope="module")
def server() -> Iterator[SpawnedServer]:
    with spawn_server("tiny", args=LIMITS, start_timeout_s=120) as running:
        yield running


async def connect(server: SpawnedServer, **kwargs: Any) -> Client:
    return await Client.connect(server.url, **kwargs)


async def bystander_speaks(server: SpawnedServer) -> dict[str, Any]:
    """A session from another address speaks a sentence to its end."""
    client = await connect(server, **AUTH)
    await client.send(type="text.append", context_id="b", text="hello from elsewhere")
    await client.send(type="context.end", context_id="b")
    done = await client.until("context.done", "b", timeout=30)
    await client.close()
    return done


def speech_status(server: SpawnedServer) -> int:
    answer = httpx.post(
        f"{server.http}/v1/audio/speech",
        json={"input": "hello there", "response_format": "pcm"},
        headers={"authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    return answer.status_code


async def open_empty_contexts(server: SpawnedServer, sockets: int) -> list[Client]:
    """``sockets`` sockets, each creating as many contexts as its session allows: the
    client gets as many as the engine has slots, the rest are ``rate_limited``."""
    clients, outcomes = [], []
    for s in range(sockets):
        client = await connect(server, **ATTACKER)
        for i in range(SLOTS):
            await client.send(type="context.create", context_id=f"c{s}-{i}")
        for _ in range(SLOTS):
            msg = await client.until_any(("context.created", "error"))
            outcomes.append(msg.get("code", msg["type"]))
        clients.append(client)
    assert sorted(outcomes) == ["context.created"] * SLOTS + ["rate_limited"] * (
        (sockets - 1) * SLOTS
    )
    return clients


async def keep_alive(clients: list[Client]) -> None:
    """What an attacker does to hold its sockets: a keepalive every half second."""
    while True:
        await asyncio.sleep(0.5)
        for client in clients:
            await client.send(type="keepalive")


async def test_empty_contexts_take_no_slot(server: SpawnedServer) -> None:
    attackers = await open_empty_contexts(server, sockets=2)  # twice the engine's slots
    holding = asyncio.create_task(keep_alive(attackers))
    try:
        for _ in range(3):
            done = await bystander_speaks(server)
            assert done["audio_ms"] > 0
            assert await asyncio.to_thread(speech_status, server) == 200
            await asyncio.sleep(1)
        # The attacker's contexts still work once they have something to say.
        client = attackers[0]
        await client.send(type="text.append", context_id="c0-0", text="now I speak")
        await client.send(type="context.end", context_id="c0-0")
        assert (await client.until("context.done", "c0-0"))["audio_ms"] > 0
    finally:
        holding.cancel()
    for client in attackers:
        await client.close()


async def test_a_socket_with_silent_contexts_times_out(server: SpawnedServer) -> None:
    client = await connect(server, **ATTACKER)
    await client.send(type="context.create", context_id="silent")
    await client.until("context.created", "silent")
    started = time.monotonic()
    with pytest.raises(websockets.ConnectionClosed) as closed:
        while True:
            await client.next_message(timeout=20)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4008
    assert 2.5 < time.monotonic() - started < 10
    assert any(m.get("code") == "idle_timeout" for m in client.got.of_type("error"))


async def test_an_idle_context_is_ended_and_frees_its_slot(server: SpawnedServer) -> None:
    client = await connect(server, **ATTACKER)
    await client.send(type="text.append", context_id="idle", text="a few words ", flush=True)
    await client.until("context.flushed", "idle")
    started = time.monotonic()
    warning = await client.until("warning", "idle", timeout=20)
    assert warning["code"] == "idle_timeout"
    assert 1.5 < time.monotonic() - started < 8
    done = await client.until("context.done", "idle")
    assert done["audio_ms"] > 0
    await client.send(type="text.append", context_id="idle", text="too late")
    late = await client.until("error")
    assert late["code"] == "context_closed"
    await client.close()


async def test_one_client_holds_at_most_its_share(server: SpawnedServer) -> None:
    """Contexts that do speak (and then wait for more text) take slots, up to the
    client's share (half the engine); a bystander still speaks."""
    share = SLOTS // 2
    clients = [await connect(server, **ATTACKER) for _ in range(2)]
    for s, client in enumerate(clients):
        for i in range(SLOTS):
            await client.send(type="text.append", context_id=f"h{s}-{i}", text="hold ", flush=True)
    outcomes: dict[str, int] = {"flushed": 0, "rate_limited": 0}
    for client in clients:
        for _ in range(SLOTS):
            msg = await client.until_any(("context.flushed", "error"), timeout=30)
            outcomes["flushed" if msg["type"] == "context.flushed" else msg["code"]] += 1
    assert outcomes == {"flushed": share, "rate_limited": 2 * SLOTS - share}
    done = await bystander_speaks(server)
    assert done["audio_ms"] > 0
    assert await asyncio.to_thread(speech_status, server) == 200
    for client in clients:
        await client.close()


async def test_a_token_socket_closes_when_its_token_expires(server: SpawnedServer) -> None:
    minted = httpx.post(
        f"{server.http}/v1/auth/tokens",
        json={"expires_in_s": 2},
        headers={"authorization": f"Bearer {ATTACKER_KEY}"},
    ).json()
    url = f"{server.url}?token={minted['token']}"
    speaking = await Client.connect(url, **ATTACKER_ADDRESS)
    idle = await Client.connect(url, **ATTACKER_ADDRESS)
    # Text that waits for more (no sentence end, manual buffer): spoken at expiry.
    await speaking.send(type="context.create", context_id="talk", buffer={"mode": "manual"})
    await speaking.send(type="text.append", context_id="talk", text="words sent in time")
    for client in (speaking, idle):
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                await client.next_message(timeout=20)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4001
        assert time.time() >= minted["expires_at"] - 0.5
    warnings = [m["code"] for m in speaking.got.of_type("warning")]
    assert warnings == ["token_expired"]
    done = speaking.got.of_type("context.done")
    assert len(done) == 1 and done[0]["audio_ms"] == (len("words sent in time") + 3) * 20
    assert [m["code"] for m in idle.got.of_type("warning")] == ["token_expired"]


async def test_the_vllm_socket_closes_when_its_token_expires(server: SpawnedServer) -> None:
    minted = httpx.post(
        f"{server.http}/v1/auth/tokens",
        json={"expires_in_s": 1},
        headers={"authorization": f"Bearer {KEY}"},
    ).json()
    url = server.url.replace("/ws", "/stream") + f"?token={minted['token']}"
    async with websockets.connect(url, **ATTACKER_ADDRESS) as ws:
        await ws.send('{"type": "session.config"}')
        await ws.send('{"type": "input.text", "text": "spoken before the end"}')
        messages = []
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                data = await asyncio.wait_for(ws.recv(), 20)
                if isinstance(data, str):
                    messages.append(data)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4001
    assert any('"audio.done"' in m for m in messages)
    assert any("token_expired" in m for m in messages)
