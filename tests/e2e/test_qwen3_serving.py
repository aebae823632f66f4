"""The flagship family served end to end from a checkpoint directory (tiny random weights)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.serving import RunningServer, run_server
from tests.wsclient import Client
from voiceserver.config import ServerConfig, config_for_checkpoint, with_checkpoint

TEXT = "Hello there, how are you today?"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("qwen3_serving")
    return build_checkpoint(
        root / "cv", BuildOptions(variant="custom_voice", size_name="1b7", seed=5)
    )


@pytest.fixture(scope="module")
def server(checkpoint: Path) -> Iterator[RunningServer]:
    config = with_checkpoint(config_for_checkpoint(checkpoint, {"max_frames": 120}), checkpoint)
    with run_server(config, ServerConfig()) as running:
        yield running


def speaker(server: RunningServer) -> str:
    return server.runtime.model.capabilities.voices[0].name


async def stream_words(server: RunningServer, cid: str, **create: object) -> Client:
    client = await Client.connect(server.ws)
    await client.send(type="context.create", context_id=cid, **create)
    for i, word in enumerate(TEXT.split(" ")):
        await client.send(type="text.append", context_id=cid, text=word if i == 0 else " " + word)
    return client


def test_config_is_picked_from_the_checkpoint(checkpoint: Path) -> None:
    config = config_for_checkpoint(checkpoint)
    assert config.family == "qwen3_tts" and config.name == "qwen3-tts-1.7b-customvoice"
    assert config.engine.first_chunk_frames == 1


async def test_websocket_streams_from_a_checkpoint(server: RunningServer) -> None:
    voice = speaker(server)
    client = await stream_words(server, "q", voice=voice, temperature=0, streaming_text=True)
    await client.send(type="context.end", context_id="q")
    done = await client.until("context.done", "q", timeout=120)
    await client.close()
    audio = np.frombuffer(bytes(client.got.audio["q"]), np.int16)
    assert len(audio) > 0 and done["usage"]["frames"] >= 1
    # 12.5 Hz frames at 24 kHz: the audio is a whole number of 80 ms frames.
    assert len(audio) == done["usage"]["frames"] * 1920
    # Greedy is deterministic: the same request gives the same audio. The mode is pinned
    # (streaming_text): left open, a context picks it from whether its text is all there
    # when it starts, which depends on timing.
    again = await stream_words(server, "q2", voice=voice, temperature=0, streaming_text=True)
    await again.send(type="context.end", context_id="q2")
    await again.until("context.done", "q2", timeout=120)
    await again.close()
    repeat = np.frombuffer(bytes(again.got.audio["q2"]), np.int16)
    assert repeat.shape == audio.shape
    differ = np.flatnonzero(repeat != audio)
    assert differ.size == 0, f"{differ.size} samples differ, the first at {differ[:1]}"


async def test_streaming_text_chosen_per_context(server: RunningServer) -> None:
    """streaming_text on context.create picks the mode: word times need streaming text,
    so false is answered with a warning and no timestamps, true gets them."""
    voice = speaker(server)
    got = {}
    for flag in (False, True):
        cid = f"mode-{flag}"
        client = await Client.connect(server.ws)
        await client.send(
            type="context.create",
            context_id=cid,
            voice=voice,
            temperature=0,
            timestamps="word",
            streaming_text=flag,
        )
        await client.send(type="text.append", context_id=cid, text="Hello there.")
        await client.send(type="context.end", context_id=cid)
        await client.until("context.done", cid, timeout=120)
        await client.close()
        got[flag] = client.got
    assert [w["context_id"] for w in got[False].of_type("warning")] == ["mode-False"]
    assert not got[False].of_type("timestamps")
    assert not got[True].of_type("warning")
    words = [w["text"] for m in got[True].of_type("timestamps") for w in m["words"]]
    assert words == ["Hello", "there."]


async def test_unknown_speaker_and_bad_sampling_are_errors(server: RunningServer) -> None:
    client = await Client.connect(server.ws)
    await client.send(type="context.create", context_id="bad", voice="nobody")
    error = await client.until("error")
    assert error["code"] == "unknown_voice" and error["param"] == "voice"
    await client.send(type="context.create", context_id="hot", temperature=7)
    error = await client.until("error")
    assert error["code"] == "invalid_field" and error["param"] == "temperature"
    await client.close()


async def test_http_shim_from_a_checkpoint(server: RunningServer) -> None:
    async with httpx.AsyncClient(timeout=120) as http:
        body = {"input": TEXT, "voice": speaker(server), "response_format": "pcm", "temperature": 0}
        response = await http.post(f"{server.http}/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("audio/pcm")
    assert len(response.content) > 0 and len(response.content) % (1920 * 2) == 0


def test_voiceserver_serve_model_dir_cli(checkpoint: Path, tmp_path: Path) -> None:
    """`voiceserver serve --model DIR` picks the family from the checkpoint and serves it."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).parent / "voiceserver"
    proc = subprocess.Popen(
        [
            str(exe),
            "serve",
            "--model",
            str(checkpoint),
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--voices-dir",
            str(tmp_path / "voices"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).json()
                break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.monotonic() < deadline
                time.sleep(0.3)
        entry = models["data"][0]
        assert entry["family"] == "qwen3_tts" and entry["sample_rate"] == 24000
        body = json.dumps(
            {"input": "Hi there.", "voice": entry["voices"][0], "response_format": "wav"}
        )
        response = httpx.post(
            f"http://127.0.0.1:{port}/v1/audio/speech",
            content=body,
            headers={"content-type": "application/json"},
            timeout=120,
        )
        assert response.status_code == 200 and response.content[:4] == b"RIFF"
    finally:
        proc.terminate()
        proc.wait(30)


async def test_frame_cap_ends_with_a_warning_not_a_hang(server: RunningServer) -> None:
    client = await stream_words(
        server, "cap", voice=speaker(server), temperature=0, max_new_tokens=3
    )
    await client.send(type="context.end", context_id="cap")
    done = await client.until("context.done", "cap", timeout=120)
    await client.close()
    warnings = [m for m in client.got.messages if m["type"] == "warning"]
    assert [w["code"] for w in warnings] == ["max_frames_reached"]
    assert done["usage"]["frames"] == 3
    assert len(client.got.audio["cap"]) == 3 * 1920 * 2
