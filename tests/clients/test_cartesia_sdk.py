"""Cartesia's Python SDK (``cartesia`` 4.x), unchanged but for its base URLs, against the
real server on loopback with the Piper voice: ``tts.generate`` (``/tts/bytes``),
``tts.generate_sse``, the WebSocket client with contexts and timestamps, and the voices
listing. The SDK derives its socket URL from ``base_url`` with the scheme ``wss``; a
server without TLS is named by ``websocket_base_url`` too (docs/cartesia.md)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Iterator

import av
import numpy as np
import pytest
from cartesia import AsyncCartesia, BadRequestError, Cartesia

from protocol.compat_cartesia import voice_uuid
from tests.clients.cartesia_piper import piper_config
from tests.serving import RunningServer, run_server
from voiceserver.config import ServerConfig

KEY = "sdk-cartesia-key"
VOICE = {"mode": "id", "id": voice_uuid("joe")}
RAW = {"container": "raw", "encoding": "pcm_f32le", "sample_rate": 22050}


@pytest.fixture(scope="module")
def piper_server() -> Iterator[RunningServer]:
    config = piper_config()
    with run_server(config, ServerConfig(api_keys=(KEY,))) as server:
        yield server


@pytest.fixture
async def client(piper_server: RunningServer) -> AsyncIterator[AsyncCartesia]:
    ws_url = f"ws://{piper_server.host}:{piper_server.port}"
    async with AsyncCartesia(
        api_key=KEY, base_url=piper_server.http, websocket_base_url=ws_url, max_retries=0
    ) as sdk:
        yield sdk


def test_generate_wav_and_bytes(piper_server: RunningServer) -> None:
    with Cartesia(api_key=KEY, base_url=piper_server.http, max_retries=0) as sdk:
        wav = sdk.tts.generate(
            model_id="sonic-3",
            transcript="Hello from the SDK.",
            voice=VOICE,
            output_format={"container": "wav", "encoding": "pcm_s16le", "sample_rate": 22050},
            language="en",
        ).read()
        raw = b"".join(
            sdk.tts.bytes(
                model_id="sonic-3",
                transcript="Hello from the SDK.",
                voice=voice_uuid("joe"),
                output_format=RAW,
            )
        )
        with pytest.raises(BadRequestError, match="unknown_voice"):
            sdk.tts.generate(
                model_id="sonic-3", transcript="x", voice="nobody", output_format=RAW
            ).read()
    with av.open(io.BytesIO(wav)) as container:
        stream = container.streams.audio[0]
        decoded = np.concatenate([f.to_ndarray()[0] for f in container.decode(stream)])
        assert stream.rate == 22050
    floats = np.frombuffer(raw, "<f4")
    assert len(decoded) == len(floats) > 22050 // 2
    assert np.abs(decoded / 32768 - floats).max() < 1e-3


async def test_websocket_contexts_with_timestamps(client: AsyncCartesia) -> None:
    texts = {"one": ["Hello there, ", "this is the first context."], "two": ["And a second."]}
    async with client.tts.websocket_connect() as connection:

        async def speak(name: str) -> tuple[bytes, list[str], list[float]]:
            ctx = connection.context(
                name,
                model_id="sonic-3",
                voice=VOICE,
                output_format=RAW,
                add_timestamps=True,
                language="en",
            )
            for piece in texts[name]:
                await ctx.push(piece)
            await ctx.no_more_inputs()
            audio, words, ends = b"", [], []
            async for event in ctx.receive():
                assert event.type != "error", event
                if event.type == "chunk":
                    audio += event.audio or b""
                elif event.type == "timestamps" and event.word_timestamps is not None:
                    words += event.word_timestamps.words
                    ends += event.word_timestamps.end
            assert event.type == "done"
            return audio, words, ends

        results = await asyncio.gather(speak("one"), speak("two"))
    for name, (audio, words, ends) in zip(texts, results, strict=True):
        seconds = len(audio) / 4 / 22050
        assert seconds > 0.5
        assert words == "".join(texts[name]).split()
        assert ends == sorted(ends) and ends[-1] <= seconds + 0.02


async def test_websocket_cancel_and_errors(client: AsyncCartesia) -> None:
    async with client.tts.websocket_connect() as connection:
        talk = connection.context("talk", model_id="sonic-3", voice=VOICE, output_format=RAW)
        await talk.push("A long answer that the listener will interrupt quite soon. " * 4)
        async for event in talk.receive():
            if event.type == "chunk":
                break
        await talk.cancel()
        bad = connection.context("bad", model_id="sonic-3", voice="nobody", output_format=RAW)
        await bad.send(transcript="Not me.", voice="nobody", continue_=False)
        events = [event async for event in bad.receive()]
        assert [e.type for e in events] == ["error"]
        error = events[0]
        assert error.error_code == "unknown_voice" and error.status_code == 400
        assert error.context_id == "bad" and error.title and "nobody" in error.message
        ok = connection.context("ok", model_id="sonic-3", voice=VOICE, output_format=RAW)
        await ok.send(transcript="Fine.", voice=VOICE, continue_=False)
        kinds = [event.type async for event in ok.receive()]
        assert kinds[-1] == "done" and "chunk" in kinds


async def test_sse_and_voices(client: AsyncCartesia) -> None:
    stream = await client.tts.generate_sse(
        model_id="sonic-3",
        transcript="Streamed as events.",
        voice=VOICE,
        output_format=RAW,
        add_timestamps=True,
    )
    kinds, words = [], []
    async for event in stream:
        kinds.append(event.type)
        if event.type == "timestamps":
            words += event.word_timestamps.words
    assert kinds[-1] == "done" and "chunk" in kinds
    assert words == ["Streamed", "as", "events."]
    voices = [voice async for voice in client.voices.list(limit=1)]
    assert [(v.id, v.name) for v in voices] == [(voice_uuid("joe"), "joe")]
    voice = await client.voices.get(voice_uuid("joe"))
    assert voice.name == "joe" and voice.language == "en"
