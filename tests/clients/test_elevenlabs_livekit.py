"""LiveKit Agents' ElevenLabs plugin (``livekit-plugins-elevenlabs``), unchanged but for its
``base_url``, through livekit-agents' own TTS API (no room), against the real server on
loopback with the Piper voice: streamed replies over ``multi-stream-input`` with word
timing, ``synthesize`` over ``/text-to-speech/{voice_id}/stream``, several streams on
one socket, interruption, an unknown voice, and the text-to-dialogue API the plugin uses
for ElevenLabs' v3 and v4 models."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
from livekit.agents import APIConnectOptions, APIStatusError, tts
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT, TimedString
from livekit.agents.utils import is_given
from livekit.plugins import elevenlabs

from tests.clients.elevenlabs_piper import KEY, VOICE, engine_contexts, piper_server
from tests.clients.elevenlabs_piper import wait_for_no_contexts as no_contexts
from tests.serving import RunningServer

TEXT = "Hello there, how are you today? I hope the weather is fine."
NO_RETRY = APIConnectOptions(max_retry=0, timeout=10)


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with piper_server() as running:
        yield running


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as http:
        yield http


def plugin(server: RunningServer, http: aiohttp.ClientSession, **options: object) -> elevenlabs.TTS:
    options = {"model": "eleven_flash_v2_5", **options}
    return elevenlabs.TTS(
        api_key=KEY,
        base_url=f"{server.http}/v1",
        voice_id=VOICE,
        http_session=http,
        **options,  # type: ignore[arg-type]
    )


def timed_words(events: list[tts.SynthesizedAudio]) -> list[TimedString]:
    return [t for ev in events for t in ev.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])]


def words_of(text: str) -> list[str]:
    return [word + " " for word in text.split(" ")]


async def stream_text(engine: elevenlabs.TTS, pieces: list[str]) -> list[tts.SynthesizedAudio]:
    async with engine.stream(conn_options=NO_RETRY) as stream:
        for piece in pieces:
            stream.push_text(piece)
        stream.flush()
        stream.end_input()
        return [ev async for ev in stream]


@pytest.mark.parametrize(("encoding", "rate"), [("pcm_24000", 24000), (None, 22050)])
async def test_streamed_reply_with_word_timing(
    server: RunningServer, session: aiohttp.ClientSession, encoding: str | None, rate: int
) -> None:
    # No encoding: the plugin's default, mp3_22050_32, decoded by the plugin.
    engine = plugin(server, session, **({"encoding": encoding} if encoding else {}))
    assert engine.capabilities.streaming and engine.capabilities.aligned_transcript
    try:
        events = await stream_text(engine, words_of(TEXT))
    finally:
        await engine.aclose()
    frames = [ev.frame for ev in events]
    assert frames and all(f.sample_rate == rate and f.num_channels == 1 for f in frames)
    seconds = sum(f.samples_per_channel for f in frames) / rate
    assert seconds > 2.5
    timed = timed_words(events)
    # Every character the plugin sent comes back, timed on the reply's clock.
    assert "".join(timed).split() == TEXT.split()
    assert all(is_given(t.start_time) and is_given(t.end_time) for t in timed)
    starts = [t.start_time for t in timed]
    assert starts == sorted(starts) and starts[0] < 0.5
    assert all(t.start_time <= t.end_time <= seconds + 0.1 for t in timed)
    assert timed[-1].end_time > seconds - 1.0
    assert len({ev.segment_id for ev in events}) == 1
    assert await no_contexts(server) == 0


async def test_synthesize_goes_through_http(
    server: RunningServer, session: aiohttp.ClientSession
) -> None:
    engine = plugin(server, session, encoding="pcm_24000")
    try:
        frame = await engine.synthesize(TEXT, conn_options=NO_RETRY).collect()
        mp3 = await plugin(server, session).synthesize(TEXT, conn_options=NO_RETRY).collect()
    finally:
        await engine.aclose()
    assert frame.sample_rate == 24000 and frame.duration > 2.5
    # The default mp3 decodes to the same speech (plus the codec's delay).
    assert mp3.sample_rate == 22050
    assert frame.duration - 0.01 <= mp3.duration <= frame.duration + 0.15


async def test_several_streams_share_one_socket(
    server: RunningServer, session: aiohttp.ClientSession
) -> None:
    engine = plugin(server, session, encoding="pcm_16000")
    texts = ["First reply here.", "A second, longer reply than the first one.", "Third."]
    sessions_before = server.runtime.sessions_open
    try:
        results = await asyncio.gather(*(stream_text(engine, [t]) for t in texts))
        # One multi-stream-input socket carried the three contexts at once.
        assert server.runtime.sessions_open == sessions_before + 1
    finally:
        await engine.aclose()
    seconds = [sum(ev.frame.samples_per_channel for ev in events) / 16000 for events in results]
    assert seconds[1] > seconds[0] > seconds[2] > 0.3
    for events, text in zip(results, texts, strict=True):
        assert "".join(timed_words(events)).split() == text.split()
    assert len({events[0].request_id for events in results}) == len(texts)


async def test_interrupting_a_stream_stops_its_context(
    server: RunningServer, session: aiohttp.ClientSession
) -> None:
    # Word by word with a chunk schedule (auto_mode off): text is not flushed, so the
    # plugin's close_context on interruption is a barge-in.
    engine = plugin(server, session, encoding="pcm_16000", chunk_length_schedule=[50])
    long_text = "This reply goes on and on, long enough to be cut off midway. " * 8
    try:
        stream = engine.stream(conn_options=NO_RETRY)
        for word in words_of(long_text):
            stream.push_text(word)
        first = await anext(stream)
        assert first.frame.samples_per_channel > 0
        assert await engine_contexts(server) >= 1
        await stream.aclose()
        # Half a minute of speech was asked for: the engine stops long before.
        assert await no_contexts(server) == 0
        # The socket serves the next reply.
        events = await stream_text(engine, ["Still here."])
        assert sum(ev.frame.samples_per_channel for ev in events) > 0.3 * 16000
    finally:
        await engine.aclose()


async def test_unknown_voice_fails_the_stream(
    server: RunningServer, session: aiohttp.ClientSession
) -> None:
    engine = elevenlabs.TTS(
        api_key=KEY, base_url=f"{server.http}/v1", voice_id="nobody", http_session=session
    )
    try:
        with pytest.raises(APIStatusError) as failed:
            await stream_text(engine, ["Nobody speaks this."])
        assert "voice_not_found" in repr(failed.value.__cause__)
        with pytest.raises(APIStatusError) as refused:
            await engine.synthesize("Nobody speaks this.", conn_options=NO_RETRY).collect()
        assert refused.value.status_code == 404
    finally:
        await engine.aclose()


async def test_dialogue_models_go_through_text_to_dialogue(
    server: RunningServer, session: aiohttp.ClientSession
) -> None:
    # The plugin sends eleven_v3 and eleven_v4 to ElevenLabs' text-to-dialogue API: its
    # multi-stream-input socket for streams, /text-to-dialogue/stream for synthesize.
    engine = plugin(server, session, model="eleven_v3", encoding="pcm_24000")
    try:
        events = await stream_text(engine, words_of(TEXT))
        frame = await engine.synthesize(TEXT, conn_options=NO_RETRY).collect()
    finally:
        await engine.aclose()
    seconds = sum(ev.frame.samples_per_channel for ev in events) / 24000
    assert seconds > 2.5 and abs(frame.duration - seconds) < 0.3
    timed = timed_words(events)
    assert "".join(timed).split() == TEXT.split()
    starts = [t.start_time for t in timed]
    assert starts == sorted(starts) and starts[0] < 0.5
    assert all(t.start_time <= t.end_time <= seconds + 0.1 for t in timed)
    assert timed[-1].end_time > seconds - 1.0


async def test_list_voices(server: RunningServer, session: aiohttp.ClientSession) -> None:
    engine = plugin(server, session)
    try:
        voices = await engine.list_voices()
    finally:
        await engine.aclose()
    assert [(v.id, v.name, v.category) for v in voices] == [(VOICE, VOICE, "premade")]
