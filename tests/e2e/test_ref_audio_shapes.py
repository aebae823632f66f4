"""Malformed ``ref_audio`` on every endpoint: a 4xx (or a socket ``error``) naming the
field, never a 500 and never a traceback in the server's log.

Before: a NUL in a path (``"/tmp/a\\u0000b.wav"``, a ``file://`` URI with ``%00``) with
``--allowed-local-media-path`` was a 500 ("embedded null byte", 3.4 KB of traceback),
and ``["a", "b"]`` (an array of strings where samples go) a 500 ``internal_error``
("could not convert string to float") from the context's preparation, also logged
with its traceback; a ``data:`` URI without a comma was an IndexError there.

The servers run in their own processes (their logs are read whole), on the tiny
random Qwen3-TTS Base checkpoint, with and without local files allowed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from bench.spawn import SpawnedServer, spawn_server

NAN, INF = float("nan"), float("inf")
SHORT = {"max_new_tokens": 3, "temperature": 0}


def shapes(allowed: Path) -> list[Any]:
    """``ref_audio`` values of every malformed shape (JSON-encodable with NaN/inf)."""
    return [
        "/tmp/a\x00b.wav",
        f"{allowed}/a\x00b.wav",
        "file:///tmp/a%00b.wav",
        f"file://{allowed}/ref%00.wav",
        f"file://{allowed}/ref.wav\x00",
        "./a\x00",
        ["a", "b"],
        [1, "a"],
        [1.0, None],
        [[1.0, 2.0], [3.0]],
        [[["x"]]],
        [[[0.1, 0.2]]],
        [True, False],
        [{"a": 1}],
        [NAN, 0.5],
        [INF] * 64,
        [1e308, -1e308],
        [],
        [[]],
        {"path": "/tmp/a.wav"},
        5,
        -1.5,
        True,
        "",
        "data:",
        "data:audio/wav;base64",
        "data:,",
        "x" * 300_000,
        "/" + "a" * 300_000,
        "file://" + "/a" * 100_000,
        "http://[::1",
        "http://",
        "https://256.1.1.1:99999/x",
        "http://a b/\x00",
        "\udc80",
        "A" * 4096,
    ]


@pytest.fixture(scope="module")
def allowed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("allowed")
    (folder / "ref.wav").write_bytes(b"RIFF")
    return folder


def spawn(base_checkpoint: Path, voices: Path, *args: str) -> Any:
    return spawn_server(
        None,
        model=base_checkpoint,
        options=("max_frames=24",),
        args=("--voices-dir", str(voices), "--allow-url-fetch", *args),
    )


@pytest.fixture(scope="module", params=["closed", "local"])
def server(
    request: pytest.FixtureRequest,
    base_checkpoint: Path,
    allowed: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SpawnedServer]:
    voices = tmp_path_factory.mktemp("voices")
    extra = ("--allowed-local-media-path", str(allowed)) if request.param == "local" else ()
    with spawn(base_checkpoint, voices, *extra) as running:
        yield running


def post(http: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    data = json.dumps(body, allow_nan=True)
    return http.post(path, content=data, headers={"content-type": "application/json"})


def names_the_field(error: dict[str, Any], *fields: str) -> bool:
    text = f"{error.get('param')} {error.get('message') or error.get('error')}"
    return any(field in text for field in fields)


def check_http(response: httpx.Response, value: Any, *fields: str) -> None:
    shown = repr(value)[:60]
    assert 400 <= response.status_code < 500, (shown, response.status_code, response.text[:300])
    error = response.json()["error"]
    assert error["code"] != "internal_error", (shown, error)
    assert names_the_field(error, *fields), (shown, error)


def check_batch(response: httpx.Response, value: Any) -> None:
    shown = repr(value)[:60]
    if response.status_code != 200:
        check_http(response, value, "ref_audio")
        return
    results = response.json()["results"]
    for result in results:
        assert result["status"] == "error", (shown, result)
        assert result["code"] != "internal_error", (shown, result)
        assert names_the_field(result, "ref_audio"), (shown, result)


async def native_error(server: SpawnedServer, value: Any) -> dict[str, Any]:
    async with websockets.connect(server.url, max_size=None) as ws:
        json.loads(await ws.recv())  # session.created
        create = {"type": "context.create", "context_id": "c", "ref_audio": value, **SHORT}
        await ws.send(json.dumps(create, allow_nan=True))
        await ws.send(json.dumps({"type": "text.append", "context_id": "c", "text": "Hello."}))
        await ws.send(json.dumps({"type": "context.end", "context_id": "c"}))
        while True:
            data = await asyncio.wait_for(ws.recv(), 60)
            if isinstance(data, bytes):
                continue
            message = json.loads(data)
            assert message["type"] != "context.done", (repr(value)[:60], "spoke")
            if message["type"] == "error":
                return message


async def vllm_error(server: SpawnedServer, value: Any) -> dict[str, Any]:
    url = server.url.replace("/v1/audio/speech/ws", "/v1/audio/speech/stream")
    async with websockets.connect(url, max_size=None) as ws:
        config = {"type": "session.config", "ref_audio": value, "x_vector_only_mode": True}
        await ws.send(json.dumps(config, allow_nan=True))
        await ws.send(json.dumps({"type": "input.text", "text": "Hello."}))
        await ws.send(json.dumps({"type": "input.done"}))
        while True:
            data = await asyncio.wait_for(ws.recv(), 60)
            if isinstance(data, bytes):
                continue
            message = json.loads(data)
            assert message["type"] != "session.done", (repr(value)[:60], "spoke")
            if message["type"] == "error":
                return message


def test_malformed_ref_audio_is_a_clear_4xx_everywhere(
    server: SpawnedServer, allowed: Path
) -> None:
    values = shapes(allowed)
    with httpx.Client(base_url=server.http, timeout=60) as http:
        for value in values:
            speech = {"input": "Hello.", "ref_audio": value, "x_vector_only_mode": True, **SHORT}
            check_http(post(http, "/v1/audio/speech", speech), value, "ref_audio")
            with_rate = {**speech, "ref_audio_sample_rate": 16000}
            check_http(post(http, "/v1/audio/speech", with_rate), value, "ref_audio")
            items = [{"input": "Hello."}, {"input": "There."}]
            top = {"ref_audio": value, "x_vector_only_mode": True, "items": items, **SHORT}
            check_batch(post(http, "/v1/audio/speech/batch", top), value)
            inner = {"x_vector_only_mode": True, **SHORT}
            inner["items"] = [{"input": "Hello.", "ref_audio": value}]
            check_batch(post(http, "/v1/audio/speech/batch", inner), value)
            for key in ("audio_sample", "ref_audio"):
                upload = post(http, "/v1/audio/voices", {"name": "fuzz", key: value})
                check_http(upload, value, "audio_sample", "ref_audio")
        assert http.get("/health").status_code == 200

    async def sockets() -> None:
        for value in values:
            error = await native_error(server, value)
            assert error["code"] != "internal_error", (repr(value)[:60], error)
            assert names_the_field(error, "ref_audio"), (repr(value)[:60], error)
            compat = await vllm_error(server, value)
            assert "internal" not in compat["message"].lower(), (repr(value)[:60], compat)
            assert "ref_audio" in compat["message"], (repr(value)[:60], compat)

    asyncio.run(sockets())
    log = server.log_path.read_text(errors="replace")
    assert "Traceback" not in log, log[-4000:]
    assert "Exception in ASGI application" not in log
