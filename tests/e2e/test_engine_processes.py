"""Two engine processes of the default voice behind one port (``--engines 2``, the
code path ``--gpus`` takes): sessions spread over both; killing one engine process
mid-stream ends only its sessions (``engine_failed``, close 1011), the others finish
byte-identical to a single-engine server, and new sessions go to the survivor."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator

import httpx
import pytest
import websockets

from tests.serving import RunningServer, run_server
from tests.wsclient import Client
from voiceserver.config import (
    EnginesConfig,
    ModelConfig,
    ServerConfig,
    load_model_config,
    with_engine_overrides,
)
from voiceserver.runtime import Runtime

SESSIONS = 32
TEXTS = 8
FORMAT = {"encoding": "pcm_s16le", "sample_rate": 22050}


def first_part(k: int) -> str:
    return f"This is voice number {k}, with its first sentence. "


def second_part(k: int) -> str:
    return f"Then a second sentence, for number {k}, ends it."


def config() -> ModelConfig:
    # Admission by measured load is off: on a busy CI core a burst of new sessions
    # would be refused (1013) for a moment, which is not what these tests look at.
    piper = load_model_config("piper-joe", {"noise_scale": 0, "noise_w_scale": 0})
    return with_engine_overrides(piper, {"admission_load": 0})


@pytest.fixture(scope="module")
def two_engines() -> Iterator[RunningServer]:
    with run_server(config(), ServerConfig(engines=EnginesConfig(processes=2))) as server:
        yield server


async def open_and_start(url: str, k: int) -> Client:
    """A session with context ``s`` open and its first sentence sent."""
    client = await Client.connect(url)
    await client.send(type="context.create", context_id="s", output_format=FORMAT)
    await client.send(type="text.append", context_id="s", text=first_part(k))
    return client


async def finish(client: Client, k: int) -> bytes:
    await client.send(type="text.append", context_id="s", text=second_part(k))
    await client.send(type="context.end", context_id="s")
    await client.until("context.done", "s", timeout=120)
    await client.close()
    return bytes(client.got.audio["s"])


async def speak_in_two_parts(url: str, k: int) -> bytes:
    client = await open_and_start(url, k)
    await client.until_audio("s", timeout=60)
    return await finish(client, k)


@pytest.fixture(scope="module")
def single_engine_audio() -> dict[int, bytes]:
    """What a server with its engine in-process says for each text, sent the same way."""
    with run_server(config(), ServerConfig()) as server:

        async def all_texts() -> dict[int, bytes]:
            return {k: await speak_in_two_parts(server.ws, k) for k in range(TEXTS)}

        return asyncio.run(all_texts())


async def ended_by_engine_loss(client: Client) -> dict:
    with contextlib.suppress(websockets.ConnectionClosed):
        while not client.got.of_type("error"):  # it may have come in finish() already
            await client.next_message(30)
    try:
        await asyncio.wait_for(client.ws.wait_closed(), 10)
    except TimeoutError:
        pytest.fail("the session of a dead engine was not closed")
    assert client.ws.close_code == 1011, client.ws.close_code
    return client.got.of_type("error")[0]


async def test_sessions_spread_and_a_dead_engine_ends_only_its_own(
    two_engines: RunningServer, single_engine_audio: dict[int, bytes]
) -> None:
    rt = two_engines.runtime
    clients = [await open_and_start(two_engines.ws, i % TEXTS) for i in range(SESSIONS)]
    # Placed one by one on the engine with the most headroom: half on each.
    assert [c.sessions for c in rt.fleet.clients] == [SESSIONS // 2, SESSIONS // 2]
    for client in clients:
        await client.until_audio("s", timeout=120)
    dead = rt.engines[1]
    os.kill(dead.pid, signal.SIGKILL)

    async def outcome(i: int, client: Client) -> tuple[str, bytes | dict]:
        try:
            return "finished", await finish(client, i % TEXTS)
        except websockets.ConnectionClosed:
            return "ended", await ended_by_engine_loss(client)

    results = await asyncio.gather(*(outcome(i, c) for i, c in enumerate(clients)))
    finished = [(i, r) for i, (kind, r) in enumerate(results) if kind == "finished"]
    ended = [(i, r) for i, (kind, r) in enumerate(results) if kind == "ended"]
    assert len(finished) == SESSIONS // 2 and len(ended) == SESSIONS // 2
    for i, audio in finished:
        assert audio == single_engine_audio[i % TEXTS], f"session {i} differs"
    for _, error in ended:
        assert isinstance(error, dict)
        assert error["code"] == "engine_failed" and error["fatal"] is True, error

    # The server says so, and places new sessions and requests on the survivor only.
    async with httpx.AsyncClient(base_url=two_engines.http, timeout=60) as http:
        health = (await http.get("/health")).json()
        assert health["status"] == "ok"
        assert [e["up"] for e in health["engines"]] == [True, False]
        metrics = (await http.get("/metrics")).text
        assert 'tts_engine_up{engine="1",model="piper-joe"} 0.0' in metrics
        assert 'tts_engine_up{engine="0",model="piper-joe"} 1.0' in metrics
        before = rt.fleet.clients[0].sessions
        again = [await open_and_start(two_engines.ws, k) for k in range(4)]
        assert rt.fleet.clients[0].sessions == before + 4
        for k, client in enumerate(again):
            assert await finish(client, k) == single_engine_audio[k]
        speech = await http.post(
            "/v1/audio/speech",
            json={"model": "piper-joe", "input": "Still here.", "response_format": "pcm"},
        )
        assert speech.status_code == 200 and len(speech.content) > 10_000


async def test_the_model_is_asked_in_the_engine_process(two_engines: RunningServer) -> None:
    """Bad input is still named (validation runs where the model lives), and the
    front end never loads the model itself."""
    client = await Client.connect(two_engines.ws)
    await client.send(type="context.create", context_id="bad", voice="nobody", output_format=FORMAT)
    error = await client.until("error")
    assert error["code"] == "unknown_voice" and error["context_id"] == "bad", error
    await client.close()
    engines = two_engines.runtime.engines
    assert all(e.pid != os.getpid() for e in engines)
    assert len({e.pid for e in engines}) == 2


def test_a_model_that_cannot_load_fails_start_up_naming_why() -> None:
    broken = load_model_config("piper-joe", {"voice_package": "no_such_voice_package"})
    with pytest.raises(RuntimeError, match="engine 0 could not start: .*no_such_voice_package"):
        Runtime.build(ServerConfig(engines=EnginesConfig(processes=1)), broken)
