"""Pipecat's Cartesia services, unchanged but for their URL, in a real Pipecat pipeline
(the service and a collector, no transport), against the real server on loopback with
the Piper voice: ``CartesiaTTSService`` (WebSocket: a context per turn, word
timestamps, interruption by ``cancel``) and ``CartesiaHttpTTSService`` (``/tts/bytes``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from pipecat.frames.frames import (
    InterruptionFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.worker import PipelineWorker
from pipecat.services.cartesia.tts import CartesiaHttpTTSService, CartesiaTTSService

from protocol.compat_cartesia import voice_uuid
from tests.clients.cartesia_piper import engine_contexts, piper_config, wait_for_no_contexts
from tests.clients.test_pipecat_tts import Collector, llm_turn, run_pipeline
from tests.serving import RunningServer, run_server
from voiceserver.config import ServerConfig

KEY = "pipecat-cartesia-key"
TURNS = [
    ["Hello there. ", "How are you today?"],
    ["I am fine, ", "thank you."],
]


@pytest.fixture(scope="module")
def piper_server() -> Iterator[RunningServer]:
    config = piper_config()
    with run_server(config, ServerConfig(api_keys=(KEY,))) as server:
        yield server


def socket_service(server: RunningServer, voice: str = voice_uuid("joe")) -> CartesiaTTSService:
    return CartesiaTTSService(
        api_key=KEY,
        url=f"ws://{server.host}:{server.port}/tts/websocket",
        settings=CartesiaTTSService.Settings(voice=voice, model="sonic-3"),
    )


async def wait_for(condition: object, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("rate", [24000, 16000])
async def test_turns_are_contexts_with_timed_words(piper_server: RunningServer, rate: int) -> None:
    tts = socket_service(piper_server)
    collector = Collector()

    async def drive(worker: PipelineWorker) -> None:
        for turn in TURNS:
            await worker.queue_frames(llm_turn(turn))
        await wait_for(lambda: len(collector.of(TTSStoppedFrame)) >= len(TURNS))

    errors: list[str] = []
    await run_pipeline(tts, collector, rate, drive, errors)
    assert not errors
    audio = collector.of(TTSAudioRawFrame)
    assert audio and all(f.sample_rate == rate and f.num_channels == 1 for f in audio)
    contexts = list(dict.fromkeys(f.context_id for f in audio))
    assert len(contexts) == len(TURNS)
    texts = collector.of(TTSTextFrame)
    for context_id, turn in zip(contexts, TURNS, strict=True):
        seconds = sum(len(f.audio) for f in audio if f.context_id == context_id) / 2 / rate
        assert seconds > 0.8
        # The server's word timestamps become the turn's text frames, in order.
        words = [f.text for f in texts if f.context_id == context_id]
        assert " ".join(words).split() == "".join(turn).split()
        pts = [f.pts for f in texts if f.context_id == context_id]
        assert all(a < b for a, b in zip(pts, pts[1:], strict=False))
    assert await wait_for_no_contexts(piper_server, KEY) == 0


async def test_interruption_cancels_the_context(piper_server: RunningServer) -> None:
    tts = socket_service(piper_server)
    collector = Collector()
    long_turn = ["This answer runs on for quite a while. " * 2, "It has more to say. " * 4]
    seen: dict[str, int] = {}

    def first_context() -> str | None:
        return collector.of(TTSAudioRawFrame)[0].context_id

    async def drive(worker: PipelineWorker) -> None:
        await worker.queue_frames(llm_turn(long_turn))
        await asyncio.wait_for(collector.audio.wait(), 30)
        seen["before"] = await engine_contexts(piper_server, KEY)
        await worker.queue_frame(InterruptionFrame())
        seen["after"] = await wait_for_no_contexts(piper_server, KEY)
        seen["frames"] = len(
            [f for f in collector.of(TTSAudioRawFrame) if f.context_id == first_context()]
        )
        await worker.queue_frames(llm_turn(["Still here."]))
        await wait_for(
            lambda: [f for f in collector.of(TTSStoppedFrame) if f.context_id != first_context()]
        )

    await run_pipeline(tts, collector, 24000, drive)
    assert seen["before"] >= 1 and seen["after"] == 0
    audio = collector.of(TTSAudioRawFrame)
    interrupted = [f for f in audio if f.context_id == first_context()]
    assert len(interrupted) == seen["frames"]  # nothing of it after the interruption
    later = [f for f in audio if f.context_id != first_context()]
    assert sum(len(f.audio) for f in later) / 2 / 24000 > 0.3


async def test_unknown_voice_is_reported(piper_server: RunningServer) -> None:
    tts = socket_service(piper_server, voice="nobody")
    collector = Collector()
    errors: list[str] = []

    async def drive(worker: PipelineWorker) -> None:
        await worker.queue_frames(llm_turn(["Nobody speaks this."]))
        await wait_for(lambda: errors)

    await run_pipeline(tts, collector, 24000, drive, errors)
    assert any("unknown_voice" in e and "nobody" in e for e in errors)
    assert collector.of(TTSAudioRawFrame) == []
    assert await wait_for_no_contexts(piper_server, KEY) == 0


async def test_http_service_speaks_each_sentence(piper_server: RunningServer) -> None:
    tts = CartesiaHttpTTSService(
        api_key=KEY,
        base_url=piper_server.http,
        settings=CartesiaHttpTTSService.Settings(voice=voice_uuid("joe"), model="sonic-3"),
    )
    collector = Collector()
    errors: list[str] = []

    async def drive(worker: PipelineWorker) -> None:
        await worker.queue_frames(llm_turn(TURNS[0]))
        await wait_for(lambda: collector.of(TTSStoppedFrame))

    await run_pipeline(tts, collector, 16000, drive, errors)
    assert not errors
    audio = collector.of(TTSAudioRawFrame)
    assert audio and all(f.sample_rate == 16000 for f in audio)
    assert sum(len(f.audio) for f in audio) / 2 / 16000 > 1.0
