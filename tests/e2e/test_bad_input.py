"""Every kind of bad input over a real socket: a stable error code, and the
session with its other contexts keeps working."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from tests.e2e.conftest import TEST_LIMITS
from tests.serving import RunningServer
from tests.wsclient import Client

TEXT = "Still speaking while errors fly."
EXPECTED_BYTES = (len(TEXT.encode()) + 3) * 480 * 2


async def start_bystander(client: Client) -> None:
    await client.send(type="context.create", context_id="bystander")
    await client.send(type="text.append", context_id="bystander", text=TEXT)


async def finish_bystander(client: Client) -> None:
    await client.send(type="context.end", context_id="bystander")
    await client.until("context.done", "bystander")
    assert len(client.got.audio["bystander"]) == EXPECTED_BYTES


@pytest.mark.parametrize(
    ("raw", "code", "param"),
    [
        ("{not json", "invalid_json", None),
        ("[1, 2]", "invalid_json", None),
        (json.dumps({"type": "no.such.thing"}), "unknown_type", None),
        (json.dumps({"text": "no type"}), "unknown_type", None),
        (
            json.dumps({"type": "text.append", "context_id": "x", "text": 5}),
            "invalid_field",
            "text",
        ),
        (
            json.dumps({"type": "context.create", "context_id": "y", "speed": "fast"}),
            "invalid_field",
            "speed",
        ),
        (
            json.dumps(
                {
                    "type": "context.create",
                    "context_id": "z",
                    "output_format": {"sample_rate": 11025},
                }
            ),
            "unsupported_value",
            "output_format.sample_rate",
        ),
        (json.dumps({"type": "context.flush", "context_id": "ghost"}), "unknown_context", None),
        (json.dumps({"type": "context.cancel", "context_id": "ghost"}), "unknown_context", None),
        (json.dumps({"type": "context.create", "context_id": "bystander"}), "context_exists", None),
        (
            json.dumps({"type": "context.create", "context_id": "v", "voice": "nobody"}),
            "unknown_voice",
            "voice",
        ),
        (json.dumps({"type": "session.update", "model": "gpt-9"}), "unknown_model", "model"),
    ],
)
async def test_bad_message_gets_error_and_session_survives(
    tiny_server: RunningServer, raw: str, code: str, param: str | None
) -> None:
    client = await Client.connect(tiny_server.ws)
    await start_bystander(client)
    await client.ws.send(raw)
    error = await client.until("error")
    assert error["code"] == code, error
    assert error["fatal"] is False
    if param is not None:
        assert error.get("param") == param, error
    await finish_bystander(client)
    await client.close()


async def test_text_over_limit(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    await start_bystander(client)
    await client.send(type="context.create", context_id="big")
    await client.send(
        type="text.append", context_id="big", text="x" * (TEST_LIMITS.max_text_chars + 1)
    )
    error = await client.until("error")
    assert error["code"] == "text_too_long" and error["context_id"] == "big"
    await finish_bystander(client)
    await client.close()


async def test_too_many_contexts(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    await start_bystander(client)
    for i in range(TEST_LIMITS.max_contexts - 1):
        await client.send(type="context.create", context_id=f"extra{i}")
    await client.send(type="context.create", context_id="one-too-many")
    error = await client.until("error")
    assert error["code"] == "too_many_contexts"
    # A cancelled context stops counting at once.
    await client.send(type="context.cancel", context_id="extra0")
    await client.until("context.cancelled", "extra0")
    await client.send(type="context.create", context_id="now-fits")
    created = await client.until("context.created", "now-fits")
    assert created["stream"] >= 0
    await finish_bystander(client)
    await client.close()


async def test_text_after_end_is_context_closed(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    await start_bystander(client)
    await client.send(type="context.create", context_id="e")
    await client.send(type="context.end", context_id="e")
    await client.send(type="text.append", context_id="e", text="late")
    error = await client.until("error")
    assert error["code"] == "context_closed"
    await finish_bystander(client)
    await client.close()


async def test_binary_from_client_rejected(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    await start_bystander(client)
    await client.ws.send(b"\x01\x02\x03")
    error = await client.until("error")
    assert error["code"] == "binary_not_allowed" and error["fatal"] is False
    await finish_bystander(client)
    await client.close()


async def test_oversized_message_gets_error_then_1009(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    other = await Client.connect(tiny_server.ws)
    await start_bystander(other)
    big = "x" * (TEST_LIMITS.max_message_bytes + 10)
    await client.ws.send(json.dumps({"type": "text.append", "context_id": "a", "text": big}))
    error = await client.until("error")
    assert error["code"] == "message_too_big" and error["fatal"] is True
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await client.until("never")
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    # Another session is untouched.
    await finish_bystander(other)
    await other.close()


async def test_unauthorized_without_key() -> None:
    from tests.serving import run_server
    from voiceserver.config import ServerConfig, load_model_config

    with run_server(load_model_config("tiny"), ServerConfig(api_keys=("sekrit",))) as server:
        with pytest.raises(websockets.InvalidStatus) as denied:
            await websockets.connect(server.ws)
        assert denied.value.response.status_code == 401
        client = await Client.connect(
            server.ws, additional_headers={"Authorization": "Bearer sekrit"}
        )
        await client.close()
        client = await Client.connect(server.ws + "?token=sekrit")
        await client.close()
        await asyncio.sleep(0)
