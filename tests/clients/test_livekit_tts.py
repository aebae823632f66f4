"""The LiveKit Agents plugin, driven through livekit-agents' own TTS API (no room),
against the real server on loopback with the tiny model (one 20 ms frame per byte of
text plus 3 tail frames, at any requested rate)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from livekit import rtc
from livekit.agents import APIStatusError, tts
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT, TimedString
from livekit.agents.utils import is_given
from voiceclient.livekit_tts import VoiceServerTTS

from protocol.messages import ContextCancelled
from tests.clients.conftest import TEST_LIMITS
from tests.clients.health import active_contexts, wait_for_no_contexts
from tests.serving import RunningServer

TEXT = "Hello there, how are you today? I am fine."


def words(text: str) -> list[str]:
    parts = text.split(" ")
    return [parts[0]] + [" " + p for p in parts[1:]]


def samples_of(text: str, sample_rate: int) -> int:
    return (len(text.encode()) + 3) * sample_rate // 50


def transcript_of(frames: list[rtc.AudioFrame]) -> list[TimedString]:
    return [t for f in frames for t in f.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])]


async def collect(stream: tts.SynthesizeStream | tts.ChunkedStream) -> list[tts.SynthesizedAudio]:
    return [ev async for ev in stream]


def check_transcript(timed: list[TimedString], text: str, audio_s: float, aligned: bool) -> None:
    """The transcript is the text that was spoken: timed words when the server aligned
    them (``aligned``), the text without times otherwise."""
    assert "".join(timed) == text
    if aligned:
        starts = [t.start_time for t in timed]
        assert all(is_given(t.start_time) and is_given(t.end_time) for t in timed)
        assert starts == sorted(starts)
        assert all(t.start_time <= t.end_time <= audio_s + 1e-6 for t in timed)
        assert len(timed) == len(text.split())
    else:
        assert all(not is_given(t.start_time) for t in timed)


@pytest.mark.parametrize(("rate", "word_timestamps"), [(24000, True), (16000, False)])
async def test_streamed_utterance_frames_at_the_requested_rate(
    tiny_server: RunningServer, rate: int, word_timestamps: bool
) -> None:
    engine = VoiceServerTTS(url=tiny_server.ws, sample_rate=rate, word_timestamps=word_timestamps)
    assert engine.capabilities.streaming and engine.capabilities.aligned_transcript
    try:
        async with engine.stream() as stream:
            for word in words(TEXT):
                stream.push_text(word)
            stream.flush()
            stream.end_input()
            events = await collect(stream)
    finally:
        await engine.aclose()
    # Timed words are checked whenever the server sent them for this context; the
    # server's model may also answer with a warning that it cannot align words.
    assert stream.context is not None
    aligned = bool(stream.context.timestamps)
    assert aligned or not word_timestamps or stream.context.warnings
    assert not (aligned and not word_timestamps)
    frames = [ev.frame for ev in events]
    assert frames and all(f.sample_rate == rate and f.num_channels == 1 for f in frames)
    total = sum(f.samples_per_channel for f in frames)
    assert total == samples_of(TEXT, rate)
    assert events[-1].is_final and not any(ev.is_final for ev in events[:-1])
    assert len({ev.segment_id for ev in events}) == 1
    check_transcript(transcript_of(frames), TEXT, total / rate, aligned)


async def test_streams_share_one_socket_with_a_context_each(tiny_server: RunningServer) -> None:
    engine = VoiceServerTTS(url=tiny_server.ws)
    texts = ["First reply here.", "A second, longer reply.", "Third."]

    async def speak(text: str) -> tuple[int, str]:
        async with engine.stream() as stream:
            stream.push_text(text)
            stream.end_input()
            events = await collect(stream)
        return sum(ev.frame.samples_per_channel for ev in events), events[0].request_id

    try:
        results = await asyncio.gather(*(speak(t) for t in texts))
        assert engine.connection.connects == 1
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{tiny_server.http}/health")).json()["sessions"] == 1
    finally:
        await engine.aclose()
    assert [n for n, _ in results] == [samples_of(t, 24000) for t in texts]
    assert len({request_id for _, request_id in results}) == len(texts)


async def test_early_close_cancels_the_context_and_frees_it(tiny_server: RunningServer) -> None:
    engine = VoiceServerTTS(url=tiny_server.ws)
    long_text = "word " * 350
    try:
        stream = engine.stream()
        stream.push_text(long_text)
        stream.end_input()
        first = await anext(stream)
        assert first.frame.samples_per_channel > 0
        ctx = stream.context
        assert ctx is not None and await active_contexts(tiny_server) == 1
        await stream.aclose()
        assert await collect(stream) == []
        cancelled = await ctx.done()
        assert isinstance(cancelled, ContextCancelled)
        assert 0 < cancelled.audio_sent_ms < (len(long_text) + 3) * 20
        assert not engine.connection.current.server_knows(ctx.context_id)
        assert await wait_for_no_contexts(tiny_server) == 0
        # The socket stays up for the next reply.
        async with engine.stream() as again:
            again.push_text("ok")
            again.end_input()
            events = await collect(again)
        assert sum(ev.frame.samples_per_channel for ev in events) == samples_of("ok", 24000)
        assert engine.connection.connects == 1
    finally:
        await engine.aclose()


async def test_synthesize_one_shot(tiny_server: RunningServer) -> None:
    engine = VoiceServerTTS(url=tiny_server.ws, sample_rate=48000)
    try:
        frame = await engine.synthesize(TEXT).collect()
        events = await collect(engine.synthesize(TEXT))
    finally:
        await engine.aclose()
    assert frame.sample_rate == 48000 and frame.samples_per_channel == samples_of(TEXT, 48000)
    timed = transcript_of([ev.frame for ev in events])
    aligned = bool(timed) and is_given(timed[0].start_time)
    check_transcript(timed, TEXT, frame.duration, aligned)


async def test_unknown_voice_is_an_api_error_naming_it(tiny_server: RunningServer) -> None:
    engine = VoiceServerTTS(url=tiny_server.ws, voice="nobody")
    try:
        with pytest.raises(APIStatusError) as failed:
            await engine.synthesize(TEXT).collect()
    finally:
        await engine.aclose()
    assert "unknown_voice" in str(failed.value) and failed.value.retryable is False


def test_unsupported_rate_is_refused_with_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="sample_rate: 11025 .* 24000"):
        VoiceServerTTS(url="ws://127.0.0.1:1/v1/audio/speech/ws", sample_rate=11025)


async def test_server_error_mid_stream_fails_it_while_text_is_still_open(
    tiny_server: RunningServer,
) -> None:
    engine = VoiceServerTTS(url=tiny_server.ws)
    try:
        async with engine.stream() as stream:
            stream.push_text("x" * (TEST_LIMITS.max_text_chars + 1))
            # No end_input: the agent is still "writing" when the server refuses.
            with pytest.raises(APIStatusError) as failed:
                await collect(stream)
        assert "text_too_long" in str(failed.value)
        assert await wait_for_no_contexts(tiny_server) == 0
    finally:
        await engine.aclose()


async def test_a_lost_socket_is_reopened_by_the_next_stream(tiny_server: RunningServer) -> None:
    engine = VoiceServerTTS(url=tiny_server.ws)
    try:
        engine.prewarm()
        first = await engine.connection.get()
        await first.close()  # what a server restart or a dropped network looks like
        frame = await engine.synthesize("back").collect()
        assert frame.samples_per_channel == samples_of("back", 24000)
        assert engine.connection.connects == 2 and engine.connection.current is not first
    finally:
        await engine.aclose()
