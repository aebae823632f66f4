"""Both plugins against a model that cannot align words: a tiny random Qwen3-TTS
checkpoint with all text before speaking (``streaming_text: false``), whose server
answers ``timestamps: word`` with a warning. The audio still comes, and so does the
transcript, without times."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT
from livekit.agents.utils import is_given
from pipecat.frames.frames import TTSAudioRawFrame, TTSStoppedFrame, TTSTextFrame
from pipecat.pipeline.worker import PipelineWorker
from voiceclient.livekit_tts import VoiceServerTTS
from voiceclient.pipecat_tts import VoiceServerTTSService
from voiceclient.timestamps import is_no_timestamps_warning

from tests.clients.health import wait_for_no_contexts
from tests.clients.test_pipecat_tts import Collector, llm_turn, run_pipeline
from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.serving import RunningServer, run_server
from voiceserver.config import ServerConfig, config_for_checkpoint, with_checkpoint

TEXT = "Hello there. How are you?"
MAX_FRAMES = 40


@pytest.fixture(scope="module")
def qwen_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root: Path = tmp_path_factory.mktemp("qwen3_untimed")
    checkpoint = build_checkpoint(
        root / "cv", BuildOptions(variant="custom_voice", size_name="1b7", seed=5)
    )
    options = {"max_frames": MAX_FRAMES, "streaming_text": False}
    config = with_checkpoint(config_for_checkpoint(checkpoint, options), checkpoint)
    with run_server(config, ServerConfig()) as running:
        yield running


def voice_of(server: RunningServer) -> str:
    return server.runtime.model.capabilities.voices[0].name


async def test_livekit_transcript_without_times(qwen_server: RunningServer) -> None:
    engine = VoiceServerTTS(url=qwen_server.ws, voice=voice_of(qwen_server))
    try:
        async with engine.stream() as stream:
            for word in TEXT.split(" "):
                stream.push_text(word + " ")
            stream.end_input()
            events = [ev async for ev in stream]
    finally:
        await engine.aclose()
    assert stream.context is not None and stream.context.timestamps == []
    assert any(is_no_timestamps_warning(w) for w in stream.context.warnings)
    frames = [ev.frame for ev in events]
    done = await stream.context.done()
    assert sum(f.samples_per_channel for f in frames) == done.audio_ms * 24
    timed = [t for f in frames for t in f.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])]
    assert "".join(timed).split() == TEXT.split()
    assert not any(is_given(t.start_time) for t in timed)


async def test_pipecat_words_without_times(qwen_server: RunningServer) -> None:
    tts = VoiceServerTTSService(url=qwen_server.ws, voice=voice_of(qwen_server))
    collector = Collector()

    async def drive(worker: PipelineWorker) -> None:
        await worker.queue_frames(llm_turn(["Hello there. ", "How are you?"]))
        while not collector.of(TTSStoppedFrame):
            await asyncio.sleep(0.02)

    await run_pipeline(tts, collector, 24000, drive)
    audio = collector.of(TTSAudioRawFrame)
    assert audio and sum(len(f.audio) for f in audio) // 2 <= MAX_FRAMES * 1920
    spoken = " ".join(f.text for f in collector.of(TTSTextFrame))
    assert spoken.split() == TEXT.split()
    assert await wait_for_no_contexts(qwen_server) == 0
