"""Agent-framework plugins start speaking once the LLM's first sentence has ended, not
when the reply is done: the LLM streams its first sentence and the first token of the
next, then stalls; audio must come during the stall. Ours (the Pipecat service and the
LiveKit plugin on the native socket) and theirs (Pipecat's and LiveKit's OpenAI,
ElevenLabs and Cartesia services, each on the protocol it speaks), on Piper: a model
that cuts text into segments, so nothing is spoken before a segment is complete."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import pytest
from livekit.agents import tokenize, tts
from livekit.plugins import cartesia as lk_cartesia
from livekit.plugins import elevenlabs as lk_elevenlabs
from livekit.plugins import openai as lk_openai
from pipecat.frames.frames import (
    ErrorFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
)
from pipecat.pipeline.worker import PipelineWorker
from pipecat.services.cartesia.tts import CartesiaTTSService
from pipecat.services.elevenlabs.tts import ElevenLabsTTSService
from pipecat.services.openai.tts import OpenAITTSService
from pipecat.services.tts_service import TTSService
from voiceclient.livekit_tts import VoiceServerTTS
from voiceclient.pipecat_tts import VoiceServerTTSService

from protocol.compat_cartesia import voice_uuid
from tests.clients.cartesia_piper import piper_config
from tests.clients.test_pipecat_tts import Collector, run_pipeline
from tests.serving import RunningServer, run_server
from voiceserver.config import ServerConfig

FIRST = ["Hello", " there,", " how", " are", " you", " today?"]
"""The LLM's first sentence, token by token (no whitespace after its end)."""
REST = [" I", " am", " doing", " well,", " thank", " you."]
"""The second sentence: its first token arrives, then the LLM stalls."""
STALL_S = 15.0
"""Longer than any wait for more text could be: audio in it was not waiting."""


@pytest.fixture(scope="module")
def piper() -> Iterator[RunningServer]:
    with run_server(piper_config(), ServerConfig()) as server:
        yield server


PLUGINS = ["ours", "openai", "elevenlabs", "cartesia"]


def pipecat_service(server: RunningServer, which: str) -> TTSService:
    ws = f"ws://{server.host}:{server.port}"
    if which == "ours":
        return VoiceServerTTSService(url=server.ws)
    if which == "openai":
        return OpenAITTSService(api_key="unused", base_url=f"{server.http}/v1")
    if which == "elevenlabs":
        settings = ElevenLabsTTSService.Settings(voice="joe", model="eleven_flash_v2_5")
        return ElevenLabsTTSService(api_key="unused", url=ws, settings=settings)
    settings = CartesiaTTSService.Settings(voice=voice_uuid("joe"), model="sonic-3")
    return CartesiaTTSService(api_key="unused", url=f"{ws}/tts/websocket", settings=settings)


@pytest.mark.parametrize("which", PLUGINS)
async def test_pipecat_speaks_the_first_sentence_while_the_llm_stalls(
    piper: RunningServer, which: str
) -> None:
    tts_service = pipecat_service(piper, which)
    collector = Collector()
    errors: list[str] = []
    during_stall: list[bool] = []

    async def drive(worker: PipelineWorker) -> None:
        await worker.queue_frame(LLMFullResponseStartFrame())
        for token in [*FIRST, REST[0]]:
            await worker.queue_frame(LLMTextFrame(token))
        try:
            await asyncio.wait_for(collector.audio.wait(), STALL_S)
            during_stall.append(True)
        except TimeoutError:
            during_stall.append(False)
        await worker.queue_frames([*(LLMTextFrame(t) for t in REST[1:]), LLMFullResponseEndFrame()])
        while not collector.of(TTSStoppedFrame):
            await asyncio.sleep(0.02)

    await run_pipeline(tts_service, collector, 24000, drive, errors)  # type: ignore[arg-type]
    assert during_stall == [True]
    assert not errors and not collector.of(ErrorFrame)
    # The whole reply was spoken: more audio than the first sentence alone.
    assert sum(len(f.audio) for f in collector.of(TTSAudioRawFrame)) > 2 * 24000


def livekit_tts(server: RunningServer, which: str, http: aiohttp.ClientSession) -> tts.TTS:
    if which == "ours":
        return VoiceServerTTS(url=server.ws)
    if which == "elevenlabs":
        return lk_elevenlabs.TTS(
            api_key="unused", base_url=f"{server.http}/v1", voice_id="joe", http_session=http
        )
    if which == "cartesia":
        return lk_cartesia.TTS(
            api_key="unused", base_url=server.http, voice=voice_uuid("joe"), http_session=http
        )
    plugin = lk_openai.TTS(base_url=f"{server.http}/v1", api_key="unused", response_format="pcm")
    # What an agent wraps a TTS without streaming input in.
    return tts.StreamAdapter(tts=plugin, sentence_tokenizer=tokenize.basic.SentenceTokenizer())


@pytest.mark.parametrize("which", PLUGINS)
async def test_livekit_speaks_the_first_sentence_while_the_llm_stalls(
    piper: RunningServer, which: str
) -> None:
    async with aiohttp.ClientSession() as http:
        engine = livekit_tts(piper, which, http)
        stream = engine.stream()
        for token in [*FIRST, REST[0]]:
            stream.push_text(token)
        events = aiter(stream)
        first = await asyncio.wait_for(anext(events), STALL_S)
        assert first.frame.samples_per_channel > 0
        for token in REST[1:]:
            stream.push_text(token)
        stream.end_input()
        samples = first.frame.samples_per_channel + sum(
            [ev.frame.samples_per_channel async for ev in events]
        )
        await stream.aclose()
        await engine.aclose()
    assert samples > 2 * first.frame.sample_rate  # the whole reply: over two seconds
