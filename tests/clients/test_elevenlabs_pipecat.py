"""Pipecat's ``ElevenLabsTTSService`` (WebSocket, ``multi-stream-input``) and
``ElevenLabsHttpTTSService`` (``/stream/with-timestamps``), unchanged but for their URL,
in a real Pipecat pipeline against the server on loopback with the Piper voice: turns as
contexts with timed words, interruption, and the HTTP service's timed words."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import pytest
from pipecat.frames.frames import (
    InterruptionFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.worker import PipelineWorker
from pipecat.services.elevenlabs.tts import ElevenLabsHttpTTSService, ElevenLabsTTSService

from tests.clients.elevenlabs_piper import KEY, VOICE, engine_contexts, piper_server
from tests.clients.elevenlabs_piper import wait_for_no_contexts as no_contexts
from tests.clients.test_pipecat_tts import Collector, llm_turn, run_pipeline
from tests.serving import RunningServer

TURNS = [
    ["Hello there. ", "How are you today?"],
    ["I am fine, ", "thank you."],
]


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with piper_server() as running:
        yield running


def socket_service(server: RunningServer) -> ElevenLabsTTSService:
    return ElevenLabsTTSService(
        api_key=KEY,
        url=f"ws://{server.host}:{server.port}",
        settings=ElevenLabsTTSService.Settings(voice=VOICE, model="eleven_flash_v2_5"),
    )


def words_of(turn: list[str]) -> list[str]:
    return " ".join(turn).split()


async def test_turns_are_contexts_with_timed_words(server: RunningServer) -> None:
    tts = socket_service(server)
    collector = Collector()
    sessions: list[int] = []
    before = server.runtime.sessions_open

    async def drive(worker: PipelineWorker) -> None:
        for turn in TURNS:
            await worker.queue_frames(llm_turn(turn))
        while len(collector.of(TTSStoppedFrame)) < len(TURNS):
            await asyncio.sleep(0.02)
        sessions.append(server.runtime.sessions_open - before)

    errors: list[str] = []
    await run_pipeline(tts, collector, 24000, drive, errors)

    assert errors == [] and sessions == [1]
    audio = collector.of(TTSAudioRawFrame)
    assert audio and all(f.sample_rate == 24000 and f.num_channels == 1 for f in audio)
    contexts = list(dict.fromkeys(f.context_id for f in audio))
    assert len(contexts) == len(TURNS)
    texts = collector.of(TTSTextFrame)
    for context, turn in zip(contexts, TURNS, strict=True):
        seconds = sum(len(f.audio) for f in audio if f.context_id == context) / 2 / 24000
        assert seconds > 0.8
        # The words come back from the alignment, each placed on the audio's clock.
        words = [f for f in texts if f.context_id == context]
        assert [f.text for f in words] == words_of(turn)
        pts = [f.pts for f in words]
        assert all(p is not None for p in pts) and pts == sorted(pts)
        assert (pts[-1] - pts[0]) / 1e9 < seconds
    assert await no_contexts(server) == 0


async def test_interruption_stops_the_context(server: RunningServer) -> None:
    tts = socket_service(server)
    collector = Collector()
    long_turn = ["This reply goes on and on, long enough to be cut off midway. "] * 8
    seen: dict[str, int] = {}

    def first_context() -> str | None:
        return collector.of(TTSAudioRawFrame)[0].context_id

    async def drive(worker: PipelineWorker) -> None:
        await worker.queue_frames(llm_turn(long_turn)[:-1])  # the reply is still streaming
        await asyncio.wait_for(collector.audio.wait(), 10)
        seen["before"] = await engine_contexts(server)
        await worker.queue_frame(InterruptionFrame())
        seen["after"] = await no_contexts(server)
        await worker.queue_frames(llm_turn(["Still here."]))
        while not [f for f in collector.of(TTSStoppedFrame) if f.context_id != first_context()]:
            await asyncio.sleep(0.02)

    await run_pipeline(tts, collector, 16000, drive)
    # Half a minute of speech was asked for: the engine stopped long before.
    assert seen == {"before": 1, "after": 0}
    audio = collector.of(TTSAudioRawFrame)
    later = [f for f in audio if f.context_id != first_context()]
    assert sum(len(f.audio) for f in later) / 2 / 16000 > 0.4


async def test_http_service_with_timed_words(server: RunningServer) -> None:
    collector = Collector()
    async with aiohttp.ClientSession() as session:
        tts = ElevenLabsHttpTTSService(
            api_key=KEY,
            base_url=server.http,
            aiohttp_session=session,
            settings=ElevenLabsHttpTTSService.Settings(voice=VOICE),
        )

        async def drive(worker: PipelineWorker) -> None:
            await worker.queue_frames(llm_turn(TURNS[0]))
            while not collector.of(TTSStoppedFrame):
                await asyncio.sleep(0.02)

        errors: list[str] = []
        await run_pipeline(tts, collector, 16000, drive, errors)
    assert errors == []
    audio = collector.of(TTSAudioRawFrame)
    seconds = sum(len(f.audio) for f in audio) / 2 / 16000
    assert all(f.sample_rate == 16000 for f in audio) and seconds > 1.0
    words = collector.of(TTSTextFrame)
    assert [f.text for f in words] == words_of(TURNS[0])
    pts = [f.pts for f in words]
    assert all(p is not None for p in pts) and pts == sorted(pts)
    assert (pts[-1] - pts[0]) / 1e9 < seconds
