"""Cartesia's HTTP endpoints (``/tts/bytes``, ``/tts/sse``, ``/voices``) over real
sockets with plain ``httpx``, against the Piper voice (noise-free: the same text gives
the same audio). Files are decoded by FFmpeg (PyAV), not by the server's code."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from typing import Any

import av
import httpx
import numpy as np
import pytest

from protocol.compat_cartesia import voice_uuid
from tests.clients.cartesia_piper import piper_config
from tests.serving import RunningServer, run_server
from voiceserver.config import Limits, ServerConfig

KEY = "cartesia-http-key"
TEXT = "Hello from the bytes endpoint."
HEADERS = {"X-API-Key": KEY, "Cartesia-Version": "2025-04-16"}


@pytest.fixture(scope="module")
def piper_server() -> Iterator[RunningServer]:
    config = piper_config()
    limits = Limits(max_text_chars=500)
    with run_server(config, ServerConfig(api_keys=(KEY,), limits=limits)) as server:
        yield server


@pytest.fixture
def http(piper_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=piper_server.http, headers=HEADERS, timeout=60) as client:
        yield client


def body(fmt: dict[str, Any], text: str = TEXT, **extra: Any) -> dict[str, Any]:
    return {
        "model_id": "sonic-3",
        "transcript": text,
        "voice": {"mode": "id", "id": voice_uuid("joe")},
        "output_format": fmt,
        "language": "en",
        **extra,
    }


def decoded(data: bytes) -> tuple[np.ndarray, int, str]:
    """Samples (float), rate and codec of a file, as FFmpeg reads it."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        name = stream.codec_context.name
        frames = [f.to_ndarray().astype(np.float32).reshape(-1) for f in container.decode(stream)]
        return np.concatenate(frames), stream.rate, name


def raw_samples(data: bytes) -> np.ndarray:
    return np.frombuffer(data, "<i2").astype(np.float32) / 32768


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text[:300]
    error = response.json()
    assert error["title"] and error["request_id"] and error["message"]
    return error


def test_raw_wav_and_mp3_files(http: httpx.Client) -> None:
    raw = http.post(
        "/tts/bytes", json=body({"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000})
    )
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("audio/pcm")
    reference = raw_samples(raw.content)
    assert len(reference) > 24000 and float(np.abs(reference).max()) > 0.05
    for encoding, codec in [
        ("pcm_s16le", "pcm_s16le"),
        ("pcm_f32le", "pcm_f32le"),
        ("pcm_mulaw", "pcm_mulaw"),
        ("pcm_alaw", "pcm_alaw"),
    ]:
        fmt = {"container": "wav", "encoding": encoding, "sample_rate": 24000}
        reply = http.post("/tts/bytes", json=body(fmt))
        assert reply.status_code == 200 and reply.headers["content-type"] == "audio/wav"
        audio, rate, name = decoded(reply.content)
        assert (rate, name) == (24000, codec) and len(audio) == len(reference)
        scale = 32768 if encoding != "pcm_f32le" else 1
        noise = np.sum((audio / scale - reference) ** 2) / np.sum(reference**2)
        assert noise < 10 ** (-25 / 10)  # G.711 is within 25 dB; the others near exact
    fmt = {"container": "mp3", "sample_rate": 22050, "bit_rate": 64000}
    mp3 = http.post("/tts/bytes", json=body(fmt))
    assert mp3.status_code == 200 and mp3.headers["content-type"] == "audio/mpeg"
    audio, rate, name = decoded(mp3.content)
    assert (rate, name) == (22050, "mp3float")
    assert abs(len(audio) / 22050 - len(reference) / 24000) < 0.1  # the encoder's padding


def test_raw_mulaw_matches_the_socket_encoding(http: httpx.Client) -> None:
    fmt = {"container": "raw", "encoding": "pcm_mulaw", "sample_rate": 8000}
    reply = http.post("/tts/bytes", json=body(fmt))
    assert reply.status_code == 200 and reply.headers["content-type"] == "audio/PCMU;rate=8000"
    codec = av.CodecContext.create("pcm_mulaw", "r")
    codec.sample_rate, codec.layout = 8000, "mono"
    audio = np.concatenate([f.to_ndarray()[0] for f in codec.decode(av.Packet(reply.content))])
    s16 = http.post(
        "/tts/bytes",
        json=body({"container": "raw", "encoding": "pcm_s16le", "sample_rate": 8000}),
    )
    reference = np.frombuffer(s16.content, "<i2").astype(np.float32)
    assert len(audio) == len(reference) == len(reply.content)
    noise = np.sum((audio - reference) ** 2) / np.sum(reference**2)
    assert noise < 10 ** (-25 / 10)


def test_sse_streams_chunks_timestamps_then_done(http: httpx.Client) -> None:
    fmt = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}
    reply = http.post("/tts/sse", json=body(fmt, add_timestamps=True, context_id="sse-1"))
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event")
    events = []
    for block in reply.text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        event = json.loads(lines["data"])
        assert lines["event"] == event["type"] and event["context_id"] == "sse-1"
        events.append(event)
    assert events[-1]["type"] == "done" and all(e["type"] != "error" for e in events)
    audio = b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "chunk")
    words = [w for e in events if e["type"] == "timestamps" for w in e["word_timestamps"]["words"]]
    ends = [t for e in events if e["type"] == "timestamps" for t in e["word_timestamps"]["end"]]
    assert words == TEXT.split()
    assert ends == sorted(ends) and ends[-1] <= len(audio) / 2 / 16000 + 0.02


def test_errors_are_cartesia_error_objects(http: httpx.Client, piper_server: RunningServer) -> None:
    raw = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}
    error = error_of(http.post("/tts/bytes", json=body(raw, voice="nobody")), 400)
    assert error["error_code"] == "unknown_voice" and voice_uuid("joe") in error["message"]
    error = error_of(http.post("/tts/bytes", json={**body(raw), "transcript": None}), 400)
    assert error["error_code"] == "missing_field" and "transcript" in error["message"]
    bad = {**raw, "encoding": "pcm_u8"}
    error = error_of(http.post("/tts/bytes", json=body(bad)), 400)
    assert (
        error["error_code"] == "unsupported_value" and "output_format.encoding" in error["message"]
    )
    error = error_of(http.post("/tts/sse", json=body({**raw, "container": "wav"})), 400)
    assert "output_format.container" in error["message"]
    error = error_of(http.post("/tts/bytes", json=body(raw, model_id="eleven_v3")), 400)
    assert error["error_code"] == "unknown_model"
    error = error_of(http.post("/tts/bytes", json=body(raw, text="x" * 501)), 400)
    assert error["error_code"] == "text_too_long"
    error = error_of(http.post("/tts/bytes", content=b"{oops", headers=HEADERS), 400)
    assert error["error_code"] == "invalid_json"
    with httpx.Client(base_url=piper_server.http) as anonymous:
        error = error_of(anonymous.post("/tts/bytes", json=body(raw)), 401)
    assert error["error_code"] == "unauthorized"
    # Cartesia's own model names all mean the served model.
    for model in ("sonic", "sonic-2", "sonic-turbo", "sonic-3-2025-10-27", "piper-joe"):
        assert http.post("/tts/bytes", json=body(raw, model_id=model)).status_code == 200


def test_voices_listing_pages_and_lookup(http: httpx.Client) -> None:
    page = http.get("/voices")
    assert page.status_code == 200
    listing = page.json()
    joe = listing["data"][0]
    assert joe["id"] == voice_uuid("joe") and joe["name"] == "joe" and joe["language"] == "en"
    assert listing["has_more"] is False
    assert http.get("/voices", params={"starting_after": joe["id"]}).json()["data"] == []
    assert http.get("/voices", params={"q": "JO"}).json()["data"] == [joe]
    assert http.get(f"/voices/{joe['id']}").json() == joe
    assert http.get("/voices/Joe").json() == joe
    error = error_of(http.get("/voices/0000"), 404)
    assert error["error_code"] == "unknown_voice"
    assert error_of(http.get("/voices", params={"limit": "0"}), 400)["error_code"]
