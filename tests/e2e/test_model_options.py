"""A model option declared once reaches every endpoint: listed, checked with one message,
honoured. The tiny model declares ``tail_frames`` (frames made after the last byte,
0 to 100, default 3); nothing else in the server names it.

Endpoints: the native socket (``options`` on ``context.create`` and ``session.update``),
HTTP speech and batch (``options``, ``extra_params``), and the vllm-omni socket
(``options`` on ``session.config``), all on one real server."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets

from tests.serving import RunningServer
from tests.wsclient import Client

TEXT = "Hello there."
RATE = 16000  # tiny's own rate: no resampling, so lengths are exact
FRAME = 320  # samples per frame at 16 kHz: one frame per byte, then the tail
PCM = {"encoding": "pcm_s16le", "sample_rate": RATE}
BAD = "tail_frames: must be an integer from 0 to 100, got 101"
FIELD = {
    "name": "tail_frames",
    "type": "integer",
    "minimum": 0,
    "maximum": 100,
    "default": 3,
    "doc": "frames made after the last byte once the text has ended",
}


def samples(tail: int) -> int:
    return (len(TEXT.encode()) + tail) * FRAME


@pytest.fixture(scope="module")
def http(tiny_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=tiny_server.http, timeout=60) as client:
        yield client


# -- each endpoint, one request ---------------------------------------------------------------


async def native(
    server: RunningServer, create: dict[str, Any], update: dict[str, Any] | None = None
) -> tuple[int | None, dict[str, Any] | None]:
    """(samples, None) for one context, or (None, the error it got)."""
    client = await Client.connect(server.ws)
    try:
        if update is not None:
            await client.send(type="session.update", event_id="u", **update)
            reply = await client.until_any(("session.updated", "error"))
            if reply["type"] == "error":
                return None, reply
        await client.send(type="context.create", context_id="c", output_format=PCM, **create)
        await client.send(type="text.append", context_id="c", text=TEXT)
        await client.send(type="context.end", context_id="c")
        reply = await client.until_any(("context.done", "error"))
        if reply["type"] == "error":
            return None, reply
        return len(client.got.audio["c"]) // 2, None
    finally:
        await client.close()


def speech(http: httpx.Client, **fields: Any) -> httpx.Response:
    body = {"input": TEXT, "response_format": "pcm", "sample_rate": RATE, **fields}
    return http.post("/v1/audio/speech", json=body)


def batch_item(http: httpx.Client, **fields: Any) -> dict[str, Any]:
    body = {"response_format": "pcm", "sample_rate": RATE, "items": [{"input": TEXT, **fields}]}
    response = http.post("/v1/audio/speech/batch", json=body)
    assert response.status_code == 200, response.text
    [result] = response.json()["results"]
    return result


async def vllm(server: RunningServer, **config: Any) -> tuple[int | None, str | None]:
    """(samples, None) for one utterance, or (None, the error's message)."""
    url = f"ws://{server.host}:{server.port}/v1/audio/speech/stream"
    async with websockets.connect(url, max_size=None) as ws:
        await ws.send(
            json.dumps(
                {
                    "type": "session.config",
                    "response_format": "pcm",
                    "sample_rate": RATE,
                    "split_granularity": "none",
                    **config,
                }
            )
        )
        await ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        await ws.send(json.dumps({"type": "input.done"}))
        audio = 0
        while True:
            data = await ws.recv()
            if isinstance(data, bytes):
                audio += len(data)
                continue
            msg = json.loads(data)
            if msg["type"] == "error":
                return None, msg["message"]
            if msg["type"] == "session.done":
                return audio // 2, None


# -- listed -----------------------------------------------------------------------------------


async def test_the_option_is_listed_where_clients_look(
    tiny_server: RunningServer, http: httpx.Client
) -> None:
    async with websockets.connect(tiny_server.ws) as ws:
        created = json.loads(await ws.recv())
    assert created["type"] == "session.created"
    assert created["option_fields"] == [FIELD]
    assert created["session"]["options"] == {}
    models = http.get("/v1/models").json()["data"]
    assert models and all(entry["option_fields"] == [FIELD] for entry in models)


# -- honoured ---------------------------------------------------------------------------------


@pytest.mark.parametrize("tail", [0, 10])
async def test_the_option_is_honoured_on_every_endpoint(
    tiny_server: RunningServer, http: httpx.Client, tail: int
) -> None:
    want = samples(tail)
    options = {"tail_frames": tail}
    assert await native(tiny_server, {"options": options}) == (want, None)
    assert await native(tiny_server, {}, {"options": options}) == (want, None)
    for fields in ({"options": options}, {"extra_params": options}):
        response = speech(http, **fields)
        assert response.status_code == 200, response.text
        assert len(response.content) // 2 == want
        result = batch_item(http, **fields)
        assert result["status"] == "success", result
        assert len(base64.b64decode(result["audio_data"])) // 2 == want
    assert await vllm(tiny_server, options=options) == (want, None)


async def test_the_models_default_applies_when_left_out_or_unset(
    tiny_server: RunningServer,
) -> None:
    assert await native(tiny_server, {}) == (samples(3), None)
    # A context's null unsets the session's value for that context: the default again.
    session = {"options": {"tail_frames": 10}}
    unset = {"options": {"tail_frames": None}}
    assert await native(tiny_server, unset, session) == (samples(3), None)
    client = await Client.connect(tiny_server.ws)
    await client.send(type="session.update", options={"tail_frames": 10})
    assert (await client.until("session.updated"))["session"]["options"] == {"tail_frames": 10}
    await client.send(type="session.update", options={"tail_frames": None})
    assert (await client.until("session.updated"))["session"]["options"] == {}
    await client.close()


# -- checked, with one message ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (101, BAD),
        (-1, "tail_frames: must be an integer from 0 to 100, got -1"),
        ("3", "tail_frames: must be an integer from 0 to 100, got a string"),
        (2.5, "tail_frames: must be an integer from 0 to 100, got 2.5"),
    ],
)
async def test_a_bad_value_gets_the_same_error_on_every_endpoint(
    tiny_server: RunningServer, http: httpx.Client, value: object, message: str
) -> None:
    options = {"tail_frames": value}
    for create, update in (({"options": options}, None), ({}, {"options": options})):
        _, error = await native(tiny_server, create, update)
        assert error is not None
        assert (error["code"], error["param"], error["message"]) == (
            "invalid_field",
            "tail_frames",
            message,
        )
    for fields in ({"options": options}, {"extra_params": options}):
        response = speech(http, **fields)
        assert response.status_code == 400
        assert response.json()["error"] == {
            "message": message,
            "type": "invalid_request_error",
            "param": "tail_frames",
            "code": "invalid_field",
        }
        result = batch_item(http, **fields)
        assert (result["status"], result["param"], result["code"], result["error"]) == (
            "error",
            "tail_frames",
            "invalid_field",
            message,
        )
    got = await vllm(tiny_server, options=options)
    assert got == (None, f"Invalid session config: invalid_field: {message}")


async def test_an_unknown_option_is_refused_naming_the_models_options(
    tiny_server: RunningServer, http: httpx.Client
) -> None:
    message = "tail_frame: not an option of the served model; its options: tail_frames"
    options = {"tail_frame": 1}
    _, error = await native(tiny_server, {"options": options})
    assert error is not None and (error["param"], error["message"]) == ("tail_frame", message)
    response = speech(http, options=options)
    assert response.status_code == 400 and response.json()["error"]["message"] == message
    assert await vllm(tiny_server, options=options) == (
        None,
        f"Invalid session config: invalid_field: {message}",
    )
    # extra_params is vllm-omni's: names a model does not take are ignored there.
    assert speech(http, extra_params=options).status_code == 200


async def test_a_malformed_options_object_is_refused(
    tiny_server: RunningServer, http: httpx.Client
) -> None:
    for options in ([1], "tail_frames=3", {f"k{i}": 1 for i in range(65)}):
        _, error = await native(tiny_server, {"options": options})
        assert error is not None and error["param"] == "options", error
        response = speech(http, options=options)
        assert response.status_code == 400 and response.json()["error"]["param"] == "options"


# -- the top-level spellings go through the same declarations ---------------------------------


async def test_top_level_names_are_checked_then_ignored_by_a_model_without_them(
    tiny_server: RunningServer,
) -> None:
    # The tiny model does not sample: a well-formed temperature is ignored (the
    # session shows it is not in effect), a malformed one refused with its range.
    client = await Client.connect(tiny_server.ws)
    await client.send(type="session.update", temperature=0.5)
    updated = await client.until("session.updated")
    assert updated["session"]["temperature"] is None and updated["session"]["options"] == {}
    await client.send(type="session.update", event_id="t", temperature=5)
    error = await client.until("error")
    assert (error["code"], error["param"], error["event_id"]) == (
        "invalid_field",
        "temperature",
        "t",
    )
    assert error["message"] == "temperature: must be a number from 0 to 2, got 5"
    await client.close()
    assert await native(tiny_server, {"temperature": 0.5, "seed": -7}) == (samples(3), None)
    _, error = await native(tiny_server, {"top_p": 0})
    assert (
        error is not None
        and error["message"] == "top_p: must be a number over 0 and at most 1, got 0"
    )
    # vllm-omni's spellings: checked against the shared declarations as well.
    _, message = await vllm(tiny_server, max_new_tokens=0)
    assert message is not None and "max_new_tokens: must be" in message and "from 1" in message
    _, message = await vllm(tiny_server, non_streaming_mode="yes")
    assert message == (
        "Invalid session config: invalid_field: non_streaming_mode: must be true or false,"
        " got a string"
    )
    assert await vllm(tiny_server, seed=-7, max_new_tokens=5) == (samples(3), None)
