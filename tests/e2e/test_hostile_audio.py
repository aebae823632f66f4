"""Reference audio whose channels crashed the server, sent through every entry point
that takes it, to a server in its own process.

Before the fix, an 8-channel WAV, FLAC or Ogg Vorbis (any size) sent as
``ref_audio`` killed the server with SIGSEGV (PyAV's ``to_ndarray`` read a ninth,
garbage plane of an 8-plane frame), and a two-channel MOV whose ``chan`` box lists
its channels out of order killed it with SIGABRT (a double free of the layout's
channel map), ending every session. Now each is down-mixed to the mean of its
channels and the request succeeds; more than 8 channels (or too short a clip) get
a 4xx or a socket error naming the field; the process lives and a bystander
session, opened before, still gets audio.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import subprocess
from collections.abc import Awaitable, Callable, Iterator

import httpx
import pytest
import websockets

from bench.spawn import SpawnedServer, spawn_server
from tests.models.audio_fuzz import channel_signals, mov_with_chan, pyav_file, sndfile, wav_s16
from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.wsclient import Client

RATE = 16000
TEXT = "Hello there."
REF_TEXT = "The quick brown fox jumps over the lazy dog."


def _eight(kind: str) -> bytes:
    signals = channel_signals(8, 1.2, RATE)
    if kind == "wav":
        return wav_s16(signals, RATE)
    if kind == "flac":
        return pyav_file(signals, RATE, "flac", "flac", "7.1")
    return sndfile(signals, RATE, "OGG", "VORBIS")


GOOD = {
    "wav-8ch": _eight("wav"),
    "flac-8ch": _eight("flac"),
    "ogg-vorbis-8ch": _eight("ogg"),
    # Two channels listed right-then-left: FFmpeg keeps a layout of custom order.
    "mov-2ch-custom-order": mov_with_chan(
        pyav_file(channel_signals(2, 1.2, RATE), RATE, "mov", "pcm_s16le", "stereo"), [2, 1]
    ),
}
REFUSED = {
    # The report's file: 12.8 KB, 8 channels of 50 ms. It crashed before any length check.
    "wav-8ch-50ms": (wav_s16(channel_signals(8, 0.05, RATE), RATE), "too short (0.05 s; at least"),
    "wav-10ch": (
        wav_s16(channel_signals(10, 1.2, RATE), RATE),
        "too many channels (10; at most 8)",
    ),
}
Outcome = tuple[bool, str]
"""(succeeded, else the error's message)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpawnedServer]:
    root = tmp_path_factory.mktemp("hostile_audio")
    ckpt = build_checkpoint(root / "base", BuildOptions(variant="base", size_name="0b6", seed=7))
    args = ("--voices-dir", str(root / "voices"))
    with spawn_server(
        None, model=ckpt, options=("max_frames=24",), args=args, start_timeout_s=300
    ) as running:
        yield running


def data_uri(audio: bytes) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(audio).decode()


async def http_speech(server: SpawnedServer, audio: bytes, name: str) -> Outcome:
    async with httpx.AsyncClient(base_url=server.http, timeout=120) as http:
        reply = await http.post(
            "/v1/audio/speech",
            json={
                "input": TEXT,
                "response_format": "pcm",
                "ref_audio": data_uri(audio),
                "ref_text": REF_TEXT,
            },
        )
    if reply.status_code == 200:
        assert len(reply.content) > 0
        return True, ""
    assert 400 <= reply.status_code < 500, (reply.status_code, reply.text)
    error = reply.json()["error"]
    assert error["param"] == "ref_audio", error
    return False, error["message"]


async def http_voice(server: SpawnedServer, audio: bytes, name: str) -> Outcome:
    async with httpx.AsyncClient(base_url=server.http, timeout=120) as http:
        reply = await http.post(
            "/v1/audio/voices",
            data={"name": name},
            files={"audio_sample": ("ref.bin", audio, "application/octet-stream")},
        )
    if reply.status_code == 200:
        assert reply.json()["success"] is True
        return True, ""
    assert 400 <= reply.status_code < 500, (reply.status_code, reply.text)
    error = reply.json()["error"]
    assert error["param"] == "audio_sample", error
    return False, error["message"]


async def native_socket(server: SpawnedServer, audio: bytes, name: str) -> Outcome:
    client = await Client.connect(server.url)
    try:
        await client.send(
            type="context.create",
            context_id="c",
            ref_audio=base64.b64encode(audio).decode(),
            ref_text=REF_TEXT,
        )
        await client.send(type="text.append", context_id="c", text=TEXT)
        await client.send(type="context.end", context_id="c")
        async with asyncio.timeout(120):
            while True:
                msg = await client.next_message(120)
                if msg["type"] == "error":
                    assert msg.get("param") == "ref_audio", msg
                    return False, msg["message"]
                if msg["type"] == "context.done":
                    assert client.got.audio["c"], msg
                    return True, ""
    finally:
        await client.close()


async def vllm_socket(server: SpawnedServer, audio: bytes, name: str) -> Outcome:
    url = server.url.replace("/v1/audio/speech/ws", "/v1/audio/speech/stream")
    async with websockets.connect(url, max_size=None) as ws:
        config = {
            "type": "session.config",
            "task_type": "Base",
            "ref_audio": data_uri(audio),
            "ref_text": REF_TEXT,
            "response_format": "pcm",
            "max_new_tokens": 3,
        }
        await ws.send(json.dumps(config))
        await ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        await ws.send(json.dumps({"type": "input.done"}))
        audio_bytes = 0
        async with asyncio.timeout(120):
            while True:
                data = await ws.recv()
                if isinstance(data, bytes):
                    audio_bytes += len(data)
                    continue
                msg = json.loads(data)
                if msg["type"] == "error":
                    assert "ref_audio" in msg["message"], msg
                    return False, msg["message"]
                if msg["type"] == "session.done":
                    assert audio_bytes > 0, msg
                    return True, ""


ENTRY_POINTS: dict[str, Callable[[SpawnedServer, bytes, str], Awaitable[Outcome]]] = {
    "http-speech": http_speech,
    "http-voices": http_voice,
    "native-socket": native_socket,
    "vllm-socket": vllm_socket,
}


async def bystander_speaks(client: Client, cid: str) -> None:
    """A context on the session opened before the hostile requests, cloning a plain
    mono voice (the Base model has no voice of its own)."""
    voice = base64.b64encode(wav_s16(channel_signals(1, 1.2, RATE))).decode()
    await client.send(type="context.create", context_id=cid, ref_audio=voice, ref_text=REF_TEXT)
    await client.send(type="text.append", context_id=cid, text=TEXT)
    await client.send(type="context.end", context_id=cid)
    done = await client.until("context.done", cid, timeout=120)
    assert done["usage"]["frames"] > 0 and client.got.audio[cid]


def alive(server: SpawnedServer) -> None:
    assert server.process is not None
    code = server.process.poll()
    assert code is None, f"the server died ({code}):\n{server.log_path.read_text()[-2000:]}"


async def sent(entry: str, server: SpawnedServer, name: str, audio: bytes) -> Outcome:
    """Send ``audio`` through ``entry``; where the connection broke, first say whether the process died (and
    of which signal: -11 is SIGSEGV, -6 SIGABRT)."""
    try:
        return await ENTRY_POINTS[entry](server, audio, f"{entry}-{name}")
    except (httpx.HTTPError, OSError, websockets.ConnectionClosed):
        assert server.process is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(server.process.wait, 10)
        alive(server)
        raise


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
async def test_many_channels_are_down_mixed_on_every_entry_point(
    server: SpawnedServer, entry: str
) -> None:
    bystander = await Client.connect(server.url)
    try:
        outcomes = {}
        for name, audio in GOOD.items():
            outcomes[name] = await sent(entry, server, name, audio)
            alive(server)
        assert outcomes == dict.fromkeys(GOOD, (True, "")), outcomes
        for name, (audio, words) in REFUSED.items():
            ok, message = await sent(entry, server, name, audio)
            alive(server)
            assert not ok and words in message, (name, message)
        await bystander_speaks(bystander, "b")
    finally:
        await bystander.close()
    alive(server)
