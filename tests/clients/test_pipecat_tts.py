"""The Pipecat service in a real Pipecat pipeline (the service and a collector, no
transport), against the real server on loopback with the tiny model (one 20 ms frame
per byte of text plus 3 tail frames, at any requested rate).

Pipecat 1.14 runs pipelines as a ``PipelineWorker`` (``PipelineTask`` is its
deprecated name) under a ``WorkerRunner``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner
from voiceclient.pipecat_tts import VoiceServerTTSService

from tests.clients.health import active_contexts, wait_for_no_contexts
from tests.serving import RunningServer

TURNS = [
    ["Hello there. ", "How are you today?"],
    ["I am fine, ", "thank you."],
]


def samples_of(text: str, sample_rate: int) -> int:
    return (len(text.encode()) + 3) * sample_rate // 50


class Collector(FrameProcessor):
    """Keeps every frame that reaches the end of the pipeline."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[Frame] = []
        self.audio = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction is FrameDirection.DOWNSTREAM:
            self.frames.append(frame)
            if isinstance(frame, TTSAudioRawFrame):
                self.audio.set()
        await self.push_frame(frame, direction)

    def of(self, kind: type[Frame]) -> list[Frame]:
        return [f for f in self.frames if isinstance(f, kind)]


async def run_pipeline(
    tts: VoiceServerTTSService,
    collector: Collector,
    rate: int,
    drive: Callable[[PipelineWorker], Awaitable[None]],
    errors: list[str] | None = None,
) -> None:
    worker = PipelineWorker(
        Pipeline([tts, collector]),
        params=PipelineParams(audio_out_sample_rate=rate),
        cancel_on_idle_timeout=False,
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(worker: PipelineWorker, frame: Frame) -> None:
        started.set()

    @worker.event_handler("on_pipeline_error")
    async def _error(worker: PipelineWorker, frame: ErrorFrame) -> None:
        if errors is not None:
            errors.append(frame.error)

    async def driver() -> None:
        await asyncio.wait_for(started.wait(), 10)
        await drive(worker)
        await worker.queue_frame(EndFrame())

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await asyncio.wait_for(asyncio.gather(runner.run(), driver()), 60)


def llm_turn(pieces: list[str]) -> list[Frame]:
    return [
        LLMFullResponseStartFrame(),
        *(LLMTextFrame(p) for p in pieces),
        LLMFullResponseEndFrame(),
    ]


@pytest.mark.parametrize(("rate", "word_timestamps"), [(24000, True), (16000, False)])
async def test_turns_are_contexts_on_one_socket_at_the_pipeline_rate(
    tiny_server: RunningServer, rate: int, word_timestamps: bool
) -> None:
    tts = VoiceServerTTSService(url=tiny_server.ws, word_timestamps=word_timestamps)
    collector = Collector()
    sessions: list[int] = []

    async def drive(worker: PipelineWorker) -> None:
        for turn in TURNS:
            await worker.queue_frames(llm_turn(turn))
        # Both turns are served before the pipeline ends.
        while len(collector.of(TTSStoppedFrame)) < len(TURNS):
            await asyncio.sleep(0.02)
        sessions.append(tiny_server.runtime.sessions_open)

    await run_pipeline(tts, collector, rate, drive)

    audio = collector.of(TTSAudioRawFrame)
    assert audio and all(f.sample_rate == rate and f.num_channels == 1 for f in audio)
    contexts = list(dict.fromkeys(f.context_id for f in audio))
    assert len(contexts) == len(TURNS)
    for context_id, turn in zip(contexts, TURNS, strict=True):
        got = sum(len(f.audio) for f in audio if f.context_id == context_id) // 2
        assert got == samples_of(" ".join(p.strip() for p in turn), rate)
    assert sessions == [1]
    # The turns' words reach the pipeline (timed by the server when it aligns words).
    texts = collector.of(TTSTextFrame)
    spoken = " ".join(f.text for f in texts)
    assert spoken.split() == " ".join(" ".join(t) for t in TURNS).split()
    if word_timestamps:
        # The tiny model aligns words: each word plays after the one before it.
        for context_id in contexts:
            pts = [f.pts for f in texts if f.context_id == context_id]
            assert all(a < b for a, b in zip(pts, pts[1:], strict=False))
    assert await active_contexts(tiny_server) == 0


async def test_speak_frame_is_its_own_context(tiny_server: RunningServer) -> None:
    tts = VoiceServerTTSService(url=tiny_server.ws, voice="tiny-b")
    collector = Collector()
    text = "Speak this now."

    async def drive(worker: PipelineWorker) -> None:
        await worker.queue_frame(TTSSpeakFrame(text))
        while not collector.of(TTSStoppedFrame):
            await asyncio.sleep(0.02)

    await run_pipeline(tts, collector, 24000, drive)
    audio = collector.of(TTSAudioRawFrame)
    assert sum(len(f.audio) for f in audio) // 2 == samples_of(text, 24000)


async def test_interruption_stops_audio_and_frees_the_context(tiny_server: RunningServer) -> None:
    tts = VoiceServerTTSService(url=tiny_server.ws)
    collector = Collector()
    long_text = "word " * 350
    seen: dict[str, int] = {}

    async def drive(worker: PipelineWorker) -> None:
        await worker.queue_frames(llm_turn([long_text]))
        await asyncio.wait_for(collector.audio.wait(), 10)
        seen["before"] = await active_contexts(tiny_server)
        await worker.queue_frame(InterruptionFrame())
        seen["after"] = await wait_for_no_contexts(tiny_server)
        seen["frames"] = len(collector.of(TTSAudioRawFrame))
        # Nothing more of the interrupted context arrives, and the socket still serves.
        await worker.queue_frames(llm_turn(["Still here."]))
        while not [f for f in collector.of(TTSStoppedFrame) if f.context_id != first_context()]:
            await asyncio.sleep(0.02)

    def first_context() -> str | None:
        return collector.of(TTSAudioRawFrame)[0].context_id

    await run_pipeline(tts, collector, 24000, drive)

    assert seen["before"] == 1 and seen["after"] == 0
    audio = collector.of(TTSAudioRawFrame)
    interrupted = [f for f in audio if f.context_id == first_context()]
    assert len(interrupted) == seen["frames"]
    assert sum(len(f.audio) for f in interrupted) // 2 < samples_of(long_text, 24000)
    later = [f for f in audio if f.context_id != first_context()]
    assert sum(len(f.audio) for f in later) // 2 == samples_of("Still here.", 24000)


async def test_unknown_voice_is_reported_and_the_socket_goes_on(tiny_server: RunningServer) -> None:
    tts = VoiceServerTTSService(url=tiny_server.ws, voice="nobody")
    collector = Collector()
    errors: list[str] = []

    async def drive(worker: PipelineWorker) -> None:
        await worker.queue_frames(llm_turn(["Nobody speaks this."]))
        while not errors:
            await asyncio.sleep(0.02)
        # Let the refusals of the text and end that were in flight arrive too.
        await asyncio.sleep(0.2)

    await run_pipeline(tts, collector, 24000, drive, errors)
    # The refusal, once (pipecat adds its own note of a turn without audio); the text
    # and end already in flight for the refused context are not reported again.
    [refusal] = [e for e in errors if "VoiceServerTTSService" in e and ": unknown_voice: " in e]
    assert "nobody" in refusal
    assert not any("context_closed" in e or "unknown_context" in e for e in errors)
    assert collector.of(TTSAudioRawFrame) == []
    assert await active_contexts(tiny_server) == 0
