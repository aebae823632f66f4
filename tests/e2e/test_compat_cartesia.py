"""Cartesia's TTS WebSocket (``/tts/websocket``) over real sockets, driven by a client that
speaks exactly what Cartesia's docs show (plain ``websockets``, JSON text frames), against
the Piper voice (noise-free, so the same text gives the same audio)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import av
import numpy as np
import pytest
import websockets

from protocol.compat_cartesia import voice_uuid
from tests.clients.cartesia_piper import piper_config, wait_for_no_contexts
from tests.serving import RunningServer, run_server
from voiceserver.config import Limits, ServerConfig

KEY = "cartesia-test-key"
MAX_TEXT = 600
VOICE = {"mode": "id", "id": voice_uuid("joe")}
PCM = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}
BYTES_PER_SAMPLE = {"pcm_s16le": 2, "pcm_f32le": 4, "pcm_mulaw": 1, "pcm_alaw": 1}


@pytest.fixture(scope="module")
def piper_server() -> Iterator[RunningServer]:
    config = piper_config()
    limits = Limits(max_contexts=6, max_text_chars=MAX_TEXT)
    with run_server(config, ServerConfig(api_keys=(KEY,), limits=limits)) as server:
        yield server


def socket_url(server: RunningServer, key: str | None = KEY) -> str:
    query = "?cartesia_version=2025-04-16" + (f"&api_key={key}" if key else "")
    return f"ws://{server.host}:{server.port}/tts/websocket{query}"


def request(context_id: str, transcript: str, *, more: bool = False, **extra: Any) -> str:
    """A generation request as Cartesia's docs show it."""
    msg = {
        "model_id": "sonic-2",
        "transcript": transcript,
        "voice": VOICE,
        "language": "en",
        "context_id": context_id,
        "output_format": PCM,
        "add_timestamps": True,
        "continue": more,
    }
    msg.update(extra)
    return json.dumps(msg)


@dataclass
class Context:
    chunks: list[bytes] = field(default_factory=list)
    words: list[str] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    flushes: list[int] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False

    @property
    def audio(self) -> bytes:
        return b"".join(self.chunks)


class Reader:
    """Every message of one socket, by context, in arrival order."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.contexts: dict[str | None, Context] = {}
        self.order: list[tuple[str, str | None]] = []

    def of(self, context_id: str | None) -> Context:
        return self.contexts.setdefault(context_id, Context())

    async def read(self, timeout: float = 60) -> dict[str, Any]:
        msg = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        context_id = msg["context_id"]  # always present, as Pipecat reads it
        ctx = self.of(context_id)
        self.order.append((msg["type"], context_id))
        match msg["type"]:
            case "chunk":
                assert msg["done"] is False and msg["status_code"] == 206
                ctx.chunks.append(base64.b64decode(msg["data"]))
            case "timestamps":
                stamps = msg["word_timestamps"]
                ctx.words += stamps["words"]
                ctx.starts += stamps["start"]
                ctx.ends += stamps["end"]
            case "flush_done":
                assert msg["flush_done"] is True and msg["done"] is False
                ctx.flushes.append(msg["flush_id"])
            case "done":
                assert msg["done"] is True and msg["status_code"] == 206
                ctx.done = True
            case "error":
                assert msg["done"] is True and msg["title"] and msg["request_id"]
                assert msg["error"] == f"{msg['title']}: {msg['message']}"
                ctx.errors.append(msg)
            case other:
                pytest.fail(f"unexpected message type {other!r}")
        return msg

    async def until_done(self, *context_ids: str) -> None:
        while not all(self.of(c).done for c in context_ids):
            await self.read()

    async def error_for(self, context_id: str | None) -> dict[str, Any]:
        while not self.of(context_id).errors:
            await self.read()
        return self.of(context_id).errors.pop(0)


def check_timestamps(ctx: Context, text: str, seconds: float) -> None:
    """The words are the text's, in order, never going back, within the audio."""
    assert ctx.words == text.split()
    assert ctx.starts == sorted(ctx.starts) and ctx.ends == sorted(ctx.ends)
    assert all(0 <= s <= e for s, e in zip(ctx.starts, ctx.ends, strict=True))
    assert ctx.ends[-1] <= seconds + 0.02
    assert ctx.ends[-1] > seconds * 0.5  # the words span the speech, not a sliver of it


def samples(data: bytes, encoding: str = "pcm_s16le") -> int:
    assert len(data) % BYTES_PER_SAMPLE[encoding] == 0
    return len(data) // BYTES_PER_SAMPLE[encoding]


def as_float(data: bytes, encoding: str, rate: int) -> np.ndarray:
    """The audio as float samples; G.711 decoded by FFmpeg (PyAV), not by the server's code."""
    if encoding == "pcm_s16le":
        return np.frombuffer(data, "<i2").astype(np.float32) / 32768
    if encoding == "pcm_f32le":
        return np.frombuffer(data, "<f4").copy()
    codec = av.CodecContext.create(encoding, "r")
    codec.sample_rate, codec.layout = rate, "mono"
    frames = codec.decode(av.Packet(data))
    return np.concatenate([f.to_ndarray()[0] for f in frames]).astype(np.float32) / 32768


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    noise = float(np.sum((reference - test) ** 2))
    return 10 * np.log10(float(np.sum(reference**2)) / max(noise, 1e-30))


async def speak_alone(server: RunningServer, text: str, fmt: dict[str, Any] = PCM) -> Context:
    async with websockets.connect(socket_url(server)) as ws:
        reader = Reader(ws)
        await ws.send(request("solo", text, output_format=fmt))
        await reader.until_done("solo")
        return reader.of("solo")


async def test_contexts_stream_continue_and_flush_on_one_socket(
    piper_server: RunningServer,
) -> None:
    pieces = ["Hello there, ", "how are you ", "today?"]
    other = "A second voice on the same socket."
    async with websockets.connect(socket_url(piper_server)) as ws:
        reader = Reader(ws)
        await ws.send(request("a", pieces[0], more=True))
        await ws.send(request("b", other))
        await ws.send(request("a", pieces[1], more=True, flush=True))
        await ws.send(request("a", pieces[2], more=True))
        await ws.send(request("a", "", more=False))
        await reader.until_done("a", "b")
    a, b = reader.of("a"), reader.of("b")
    assert a.flushes == [1] and not b.flushes and not a.errors and not b.errors
    check_timestamps(a, "".join(pieces), samples(a.audio) / 16000)
    check_timestamps(b, other, samples(b.audio) / 16000)
    # The two contexts interleave on the socket; nothing follows a context's done.
    for ctx_id in ("a", "b"):
        kinds = [kind for kind, c in reader.order if c == ctx_id]
        assert kinds[-1] == "done" and kinds.count("done") == 1
    first_done = min(reader.order.index(("done", "a")), reader.order.index(("done", "b")))
    assert {c for _, c in reader.order[:first_done]} == {"a", "b"}
    # The one-shot context sounds as the same text spoken alone.
    alone = await speak_alone(piper_server, other)
    assert alone.audio == b.audio


async def test_every_encoding_is_the_same_audio(piper_server: RunningServer) -> None:
    text = "Encodings carry the same speech."
    rate = 16000
    async with websockets.connect(socket_url(piper_server)) as ws:
        reader = Reader(ws)
        for encoding in BYTES_PER_SAMPLE:
            fmt = {"container": "raw", "encoding": encoding, "sample_rate": rate}
            await ws.send(request(encoding, text, output_format=fmt, add_timestamps=False))
        fmt = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 48000}
        await ws.send(request("48k", text, output_format=fmt, add_timestamps=False))
        await reader.until_done(*BYTES_PER_SAMPLE, "48k")
    counts = {enc: samples(reader.of(enc).audio, enc) for enc in BYTES_PER_SAMPLE}
    assert len(set(counts.values())) == 1 and counts["pcm_s16le"] > rate  # over a second
    assert abs(samples(reader.of("48k").audio) - 3 * counts["pcm_s16le"]) <= 3 * 48
    reference = as_float(reader.of("pcm_s16le").audio, "pcm_s16le", rate)
    assert float(np.abs(reference).max()) > 0.05
    assert snr_db(reference, as_float(reader.of("pcm_f32le").audio, "pcm_f32le", rate)) > 60
    for g711 in ("pcm_mulaw", "pcm_alaw"):
        assert snr_db(reference, as_float(reader.of(g711).audio, g711, rate)) > 25


async def test_cancel_mid_stream_stops_the_context_and_frees_its_slot(
    piper_server: RunningServer,
) -> None:
    long_text = "This sentence keeps going for a while so that it can be interrupted. " * 6
    async with websockets.connect(socket_url(piper_server)) as ws:
        reader = Reader(ws)
        await ws.send(request("talk", long_text[:MAX_TEXT], more=True))
        while not reader.of("talk").chunks:
            await reader.read()
        await ws.send(json.dumps({"context_id": "talk", "cancel": True}))
        await ws.send(request("next", "The user spoke."))
        await reader.until_done("next")
        marker = reader.order.index(next(m for m in reader.order if m[1] == "next"))
        assert all(c != "talk" for _, c in reader.order[marker:])
        assert not reader.of("talk").done
        heard = samples(reader.of("talk").audio) / 16000
        assert 0 < heard < 10  # well short of the whole text
        assert await wait_for_no_contexts(piper_server, KEY) == 0
        # A late continuation of the cancelled context does not start it again.
        await ws.send(request("talk", "more words", more=True))
        error = await reader.error_for("talk")
        assert error["error_code"] == "context_closed" and "cancelled" in error["message"]
        # Cancelling what does not exist (or no longer does) is no error.
        await ws.send(json.dumps({"context_id": "talk", "cancel": True}))
        await ws.send(json.dumps({"context_id": "never-opened", "cancel": True}))
        await ws.send(request("last", "Still here."))
        await reader.until_done("last")
    assert not reader.of("never-opened").errors and not reader.of("talk").errors


async def test_hostile_input_gets_clear_errors_and_spares_a_bystander(
    piper_server: RunningServer,
) -> None:
    bystander = "I am a bystander and I finish my sentence."
    async with websockets.connect(socket_url(piper_server)) as ws:
        reader = Reader(ws)
        await ws.send(request("by", bystander))
        await ws.send("{not json")
        error = await reader.error_for(None)
        assert error["error_code"] == "invalid_json" and error["status_code"] == 400
        await ws.send(b"\x00\x01")
        assert (await reader.error_for(None))["error_code"] == "binary_not_allowed"

        cases: list[tuple[str, dict[str, Any], str, str]] = [
            (
                "enc",
                {"output_format": {**PCM, "encoding": "pcm_s24le"}},
                "unsupported_value",
                "output_format.encoding",
            ),
            (
                "rate",
                {"output_format": {**PCM, "sample_rate": 11025}},
                "unsupported_value",
                "output_format.sample_rate",
            ),
            (
                "wav",
                {"output_format": {**PCM, "container": "wav"}},
                "unsupported_value",
                "output_format.container",
            ),
            ("nofmt", {"output_format": None}, "missing_field", "output_format"),
            ("voice", {"voice": {"mode": "id", "id": "0000-nobody"}}, "unknown_voice", "voice.id"),
            (
                "emb",
                {"voice": {"mode": "embedding", "embedding": [0.1] * 192}},
                "unsupported_value",
                "voice.mode",
            ),
            ("novoice", {"voice": None}, "missing_field", "voice"),
            ("model", {"model_id": "gpt-4o"}, "unknown_model", "model"),
            ("lang", {"language": "xx-klingon"}, "unsupported_language", "language"),
            (
                "speed",
                {"generation_config": {"speed": 40}},
                "invalid_field",
                "generation_config.speed",
            ),
            ("flag", {"continue": "yes"}, "invalid_field", "continue"),
            ("huge", {"transcript": "word " * 100_000}, "text_too_long", "text"),
            ("ctrl", {"transcript": "bell\x07"}, "invalid_field", "transcript"),
        ]
        for context_id, change, code, param in cases:
            msg = json.loads(request(context_id, "Never spoken."))
            msg.update(change)
            await ws.send(json.dumps({k: v for k, v in msg.items() if v is not None}))
            error = await reader.error_for(context_id)
            assert error["error_code"] == code, error
            assert param in error["message"], error
            assert error["context_id"] == context_id
        await ws.send(request("voice2", "x", voice="nobody"))
        listing = (await reader.error_for("voice2"))["message"]
        assert f"joe (id {voice_uuid('joe')})" in listing

        # Unknown fields are ignored; names work as ids, in any case.
        await ws.send(request("extra", "Extra fields are fine.", voice={"id": "JOE"}, foo=[1]))
        # An error in a running context ends that context.
        await ws.send(request("run", "Starting a reply, ", more=True))
        await ws.send(request("run", "x" * MAX_TEXT, more=True))
        error = await reader.error_for("run")
        assert error["error_code"] == "text_too_long"
        await reader.until_done("by", "extra")
        for context_id, *_ in cases:
            assert not reader.of(context_id).chunks and not reader.of(context_id).done
        # The socket still serves new work after all of it.
        await ws.send(request("after", "Still answering."))
        await reader.until_done("after")
        assert not reader.of("run").done
    alone = await speak_alone(piper_server, bystander)
    assert reader.of("by").audio == alone.audio
    assert reader.of("extra").audio and reader.of("after").audio
    assert await wait_for_no_contexts(piper_server, KEY) == 0


async def test_keys_as_cartesia_clients_send_them(piper_server: RunningServer) -> None:
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(socket_url(piper_server, key=None))
    assert refused.value.response.status_code == 401
    with pytest.raises(websockets.InvalidStatus):
        await websockets.connect(socket_url(piper_server, key="wrong"))
    url = socket_url(piper_server, key=None)
    async with websockets.connect(url, additional_headers={"X-API-Key": KEY}) as ws:
        reader = Reader(ws)
        await ws.send(request("h", "Header key."))
        await reader.until_done("h")
    assert reader.of("h").audio
