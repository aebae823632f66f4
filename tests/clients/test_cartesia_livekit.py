"""LiveKit Agents' Cartesia plugin (``livekit-plugins-cartesia``), unchanged but for its
``base_url``, through livekit-agents' own TTS API (no room), against the real server on
loopback with the Piper voice: the streaming TTS over ``/tts/websocket`` with word
timestamps, ``synthesize`` over ``/tts/bytes``, interruption, several streams at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
from livekit.agents import APIConnectOptions, APIError, tts
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT, TimedString
from livekit.agents.utils import is_given
from livekit.plugins import cartesia

from protocol.compat_cartesia import voice_uuid
from tests.clients.cartesia_piper import engine_contexts, piper_config, wait_for_no_contexts
from tests.serving import RunningServer, run_server
from voiceserver.config import ServerConfig

KEY = "livekit-cartesia-key"
TEXT = "Hello there, how are you today? I hope the weather is fine."
NO_RETRY = APIConnectOptions(max_retry=0, timeout=5)


@pytest.fixture(scope="module")
def piper_server() -> Iterator[RunningServer]:
    config = piper_config()
    with run_server(config, ServerConfig(api_keys=(KEY,))) as server:
        yield server


@pytest.fixture
async def engine(piper_server: RunningServer) -> AsyncIterator[cartesia.TTS]:
    async with aiohttp.ClientSession() as session:
        plugin = cartesia.TTS(
            api_key=KEY,
            base_url=piper_server.http,
            voice=voice_uuid("joe"),
            sample_rate=24000,
            http_session=session,
        )
        yield plugin
        await plugin.aclose()


def timed_words(events: list[tts.SynthesizedAudio]) -> list[TimedString]:
    return [t for ev in events for t in ev.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])]


def words_of(text: str) -> list[str]:
    parts = text.split(" ")
    return [parts[0]] + [" " + p for p in parts[1:]]


async def test_streamed_reply_with_word_timestamps(engine: cartesia.TTS) -> None:
    assert engine.capabilities.streaming and engine.capabilities.aligned_transcript
    async with engine.stream() as stream:
        for word in words_of(TEXT):
            stream.push_text(word)
        stream.flush()
        stream.end_input()
        events = [ev async for ev in stream]
    frames = [ev.frame for ev in events]
    assert frames and all(f.sample_rate == 24000 and f.num_channels == 1 for f in frames)
    seconds = sum(f.samples_per_channel for f in frames) / 24000
    assert seconds > 2
    timed = timed_words(events)
    # The plugin aligns the server's words with the text it sent: all of it comes back.
    assert "".join(timed).split() == TEXT.split()
    starts = [t.start_time for t in timed]
    assert all(is_given(t.start_time) and is_given(t.end_time) for t in timed)
    assert starts == sorted(starts)
    assert all(t.start_time <= t.end_time <= seconds + 0.02 for t in timed)
    assert len({ev.segment_id for ev in events}) == 1


async def test_synthesize_goes_through_tts_bytes(
    engine: cartesia.TTS, piper_server: RunningServer
) -> None:
    frame = await engine.synthesize(TEXT).collect()
    assert frame.sample_rate == 24000 and frame.duration > 2
    # The same text streamed over the socket is the same length of speech.
    async with engine.stream() as stream:
        stream.push_text(TEXT)
        stream.end_input()
        streamed = sum([ev.frame.samples_per_channel async for ev in stream])
    assert abs(streamed - frame.samples_per_channel) <= 0.05 * streamed


async def test_several_streams_at_once(engine: cartesia.TTS) -> None:
    texts = ["First reply here.", "A second, longer reply than the first.", "Third."]

    async def speak(text: str) -> float:
        async with engine.stream() as stream:
            stream.push_text(text)
            stream.end_input()
            return sum([ev.frame.samples_per_channel async for ev in stream]) / 24000

    seconds = await asyncio.gather(*(speak(t) for t in texts))
    assert all(s > 0.3 for s in seconds)
    assert seconds[1] > seconds[0] > seconds[2]


async def test_interrupting_a_stream_frees_the_engine(
    engine: cartesia.TTS, piper_server: RunningServer
) -> None:
    stream = engine.stream()
    stream.push_text("This reply goes on and on, long enough to be cut off midway. " * 5)
    stream.end_input()
    first = await anext(stream)
    assert first.frame.samples_per_channel > 0
    assert await engine_contexts(piper_server, KEY) >= 1
    await stream.aclose()  # what an agent does on barge-in
    # The plugin drops the interrupted socket from its pool; the next reply's connect
    # closes it, and the server cancels the context at once (it would run for seconds).
    async with engine.stream() as reply:
        reply.push_text("Yes?")
        reply.end_input()
        assert sum([ev.frame.samples_per_channel async for ev in reply]) > 0.2 * 24000
    assert await wait_for_no_contexts(piper_server, KEY) == 0


async def test_unknown_voice_fails_the_stream(piper_server: RunningServer) -> None:
    async with aiohttp.ClientSession() as session:
        plugin = cartesia.TTS(
            api_key=KEY, base_url=piper_server.http, voice="nobody", http_session=session
        )
        try:
            with pytest.raises(APIError):
                async with plugin.stream(conn_options=NO_RETRY) as stream:
                    stream.push_text(TEXT)
                    stream.end_input()
                    _ = [ev async for ev in stream]
            with pytest.raises(APIError, match="400"):
                await plugin.synthesize(TEXT, conn_options=NO_RETRY).collect()
        finally:
            await plugin.aclose()
