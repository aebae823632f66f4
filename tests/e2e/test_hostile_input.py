"""Input that used to kill a session, crash a request or break ordering.

Before the hardening: ``buffer.max_delay_ms: 0`` closed the session with 1011
(losing another context's audio), 100,000-deep JSON closed it with 1011 (HTTP
500), NUL or a lone surrogate in text was an ``internal_error`` (HTTP 500),
``context.cancelled`` overtook its own ``context.created`` in a burst and
stream numbers were reused while the client still believed the old context
alive, ``idle_timeout_s: 1e-9`` busy-looped a core, and errors echoed any
``event_id``, however large.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets

from protocol.binary import unpack_audio
from tests.e2e.test_bad_input import finish_bystander, start_bystander
from tests.serving import RunningServer, run_server
from tests.wsclient import Client
from voiceserver.config import Limits, ServerConfig, load_model_config

DEEP = 100_000
WS_DEEP = 30_000  # within the test server's 64 KiB message limit, far past any parser's depth


def deep_json(**message: Any) -> str:
    return json.dumps(message)[:-1] + ', "x": ' + "[" * WS_DEEP + "]" * WS_DEEP + "}"


async def test_deeply_nested_json_is_an_error_not_a_close(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    await start_bystander(client)
    await client.ws.send(deep_json(type="keepalive", event_id="deep"))
    error = await client.until("error")
    assert (error["code"], error["fatal"], error.get("event_id")) == ("invalid_json", False, None)
    assert "nested" in error["message"]
    await finish_bystander(client)


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("hello\x00world", "U+0000"),
        ("bell\x07", "U+0007"),
        ("escape \x1b[31m red", "U+001B"),
    ],
)
async def test_control_characters_in_text_are_field_errors(
    tiny_server: RunningServer, text: str, what: str
) -> None:
    client = await Client.connect(tiny_server.ws)
    await start_bystander(client)
    await client.send(type="text.append", context_id="bystander", text=text, event_id="ctl")
    error = await client.until("error")
    assert (error["code"], error["param"], error["event_id"]) == ("invalid_field", "text", "ctl")
    assert what in error["message"]
    await finish_bystander(client)  # the refused piece was not appended: audio is unchanged


async def test_a_lone_surrogate_is_a_field_error(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    await start_bystander(client)
    raw = '{"type": "text.append", "context_id": "bystander", "text": "a\\ud800b", "event_id": "s"}'
    await client.ws.send(raw)
    error = await client.until("error")
    assert (error["code"], error["param"], error["event_id"]) == ("invalid_field", "text", "s")
    assert "surrogate" in error["message"]
    await finish_bystander(client)


async def test_tabs_and_newlines_are_text(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    await client.send(type="text.append", context_id="t", text="one\ttwo\r\nthree")
    await client.send(type="context.end", context_id="t")
    done = await client.until("context.done", "t")
    assert done["usage"]["chars"] == 14


def test_http_refuses_bad_text_and_deep_json_with_400(tiny_server: RunningServer) -> None:
    with httpx.Client(base_url=tiny_server.http, timeout=30) as http:
        for body, param in (
            ('{"input": "hi\\u0000there"}', "input"),
            ('{"input": "hi\\ud800there"}', "input"),
            ('{"input": "hi", "instructions": "a\\u0001"}', "instructions"),
        ):
            response = http.post(
                "/v1/audio/speech", content=body, headers={"content-type": "application/json"}
            )
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert (error["code"], error["param"]) == ("invalid_field", param), error
        response = http.post(
            "/v1/audio/speech",
            content="[" * DEEP + "]" * DEEP,
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid_json"


async def test_idle_timeout_has_a_floor(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    await client.send(type="session.update", idle_timeout_s=1e-9, event_id="tiny")
    error = await client.until("error")
    assert (error["code"], error["param"], error["event_id"]) == (
        "invalid_field",
        "idle_timeout_s",
        "tiny",
    )
    # The smallest allowed timeout with an open context does not spin the event loop:
    # the process uses far less than a core while the context waits for text (an open
    # context that says nothing is no activity: keepalives hold the session open).
    await client.send(type="session.update", idle_timeout_s=0.1)
    await client.until("session.updated")
    await client.send(type="text.append", context_id="open", text="waiting ")
    cpu = time.process_time()
    for _ in range(20):
        await asyncio.sleep(0.05)
        await client.send(type="keepalive")
    assert time.process_time() - cpu < 0.5
    await client.send(type="context.end", context_id="open")
    await client.until("context.done", "open")


async def test_oversized_ids_are_refused_and_not_echoed(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    huge = "e" * 5000
    await client.send(type="keepalive", event_id=huge)
    error = await client.until("error")
    assert (error["code"], error["param"]) == ("invalid_field", "event_id")
    assert "event_id" not in error and len(json.dumps(error)) < 1000
    await client.send(type="no.such.type", event_id=huge)
    error = await client.until("error")
    assert error["code"] == "unknown_type" and "event_id" not in error


async def test_cancel_burst_keeps_created_first_and_streams_unique(
    tiny_server: RunningServer,
) -> None:
    """300 create -> append -> cancel in one burst: every context is announced before
    anything else about it, and a stream number is only reused once the client has
    seen the context holding it end."""
    ws = await websockets.connect(tiny_server.ws, max_size=None)
    assert json.loads(await ws.recv())["type"] == "session.created"
    n = 300
    for i in range(n):
        await ws.send(json.dumps({"type": "context.create", "context_id": f"b{i}"}))
        await ws.send(json.dumps({"type": "text.append", "context_id": f"b{i}", "text": "hi "}))
        await ws.send(json.dumps({"type": "context.cancel", "context_id": f"b{i}"}))
    live: dict[int, str] = {}  # stream -> context the client believes alive
    seen: set[str] = set()
    ended: set[str] = set()
    async with asyncio.timeout(60):
        while len(ended) < n:
            data = await ws.recv()
            if isinstance(data, bytes):
                stream = unpack_audio(data).stream
                assert stream in live, f"audio on stream {stream} of no live context"
                continue
            msg = json.loads(data)
            cid = msg.get("context_id")
            if msg["type"] == "context.created":
                assert msg["stream"] not in live, (
                    f"stream {msg['stream']} reused for {cid} while {live[msg['stream']]} lives"
                )
                live[msg["stream"]] = cid
                seen.add(cid)
            elif cid is not None:
                assert cid in seen, f"{msg['type']} for {cid} before its context.created"
                if msg["type"] in ("context.cancelled", "context.done"):
                    ended.add(cid)
                    live = {s: c for s, c in live.items() if c != cid}
    await ws.close()


@pytest.fixture(scope="module")
def piper_server() -> Iterator[RunningServer]:
    limits = Limits(max_contexts=4, max_text_chars=4000)
    with run_server(load_model_config("piper-joe"), ServerConfig(limits=limits)) as server:
        yield server


async def test_zero_max_delay_speaks_each_word_as_it_completes(
    piper_server: RunningServer,
) -> None:
    client = await Client.connect(piper_server.ws)
    await client.send(type="context.create", context_id="other")
    await client.send(type="text.append", context_id="other", text="Another context speaks.")
    await client.send(
        type="context.create", context_id="eager", buffer={"mode": "auto", "max_delay_ms": 0}
    )
    await client.send(type="text.append", context_id="eager", text="Hello there ")
    await client.until_audio("eager")  # no sentence end, no flush: the timer cut it
    await client.send(type="context.end", context_id="eager")
    await client.send(type="context.end", context_id="other")
    await client.until("context.done", "eager")
    await client.until("context.done", "other")
    assert client.got.audio["other"] and client.got.audio["eager"]
    assert not client.got.of_type("error")
