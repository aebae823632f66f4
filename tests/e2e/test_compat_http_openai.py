"""OpenAI clients unchanged against the server: the ``openai`` package with OpenAI's
model and voice names, LiveKit's OpenAI TTS plugin and Pipecat's OpenAI TTS service
with their default model and voice, served-model-name aliases in /v1/models, and
OpenAI voice names mapped by config onto the model's voices."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from dataclasses import replace

import av
import httpx
import numpy as np
import openai
import pytest

from tests.serving import RunningServer, run_server
from voiceserver.config import ServerConfig, load_model_config, with_served_names
from voiceserver.names import OPENAI_MODELS, OPENAI_VOICES

KEY = "compat-key"
TEXT = "Hello there, how are you today?"


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    config = load_model_config("piper-joe", {"noise_scale": 0, "noise_w_scale": 0})
    config = with_served_names(config, ("acme/voice-1", "voice-1-alias"))
    with run_server(config, ServerConfig(api_keys=(KEY,))) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http + "/v1", api_key=KEY, max_retries=0)


@pytest.fixture(scope="module")
def reference(client: openai.OpenAI) -> np.ndarray:
    """TEXT in the model's own default voice, by its own names."""
    response = client.audio.speech.create(
        model="piper-joe", voice="joe", input=TEXT, response_format="pcm"
    )
    return np.frombuffer(response.content, "<i2")


def test_models_lists_every_alias(server: RunningServer) -> None:
    body = httpx.get(server.http + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}).json()
    ids = [entry["id"] for entry in body["data"]]
    assert ids[:2] == ["acme/voice-1", "voice-1-alias"]
    assert "piper-joe" in ids and "piper" in ids
    assert {entry["root"] for entry in body["data"]} == {"piper-joe"}
    assert body["data"][0]["task_types"] == ["CustomVoice"]


@pytest.mark.parametrize("model", [*OPENAI_MODELS, "acme/voice-1", "VOICE-1-ALIAS", "piper"])
def test_openai_and_served_model_names_are_the_served_model(
    client: openai.OpenAI, reference: np.ndarray, model: str
) -> None:
    response = client.audio.speech.create(
        model=model, voice="joe", input=TEXT, response_format="pcm"
    )
    assert np.array_equal(np.frombuffer(response.content, "<i2"), reference)


def test_every_openai_voice_speaks_in_the_default_voice(
    client: openai.OpenAI, reference: np.ndarray
) -> None:
    assert len(OPENAI_VOICES) == 13
    for voice in OPENAI_VOICES:
        with client.audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice=voice, input=TEXT, response_format="pcm"
        ) as response:
            data = b"".join(response.iter_bytes())
        assert np.array_equal(np.frombuffer(data, "<i2"), reference), voice


def test_unknown_model_names_what_is_served(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client.audio.speech.create(model="tts-2", voice="alloy", input="Hi.")
    message = str(err.value)
    assert "acme/voice-1" in message and "piper-joe" in message


def test_livekit_openai_plugin_with_its_defaults(server: RunningServer) -> None:
    """livekit.plugins.openai.TTS as an agent builds it: gpt-4o-mini-tts, voice ash,
    mp3 over SSE; its frames are 24 kHz mono and hold the whole sentence."""
    from livekit.plugins import openai as lk_openai

    async def run() -> tuple[list, int]:
        tts = lk_openai.TTS(base_url=server.http + "/v1", api_key=KEY)
        frames = []
        try:
            async with tts.synthesize(TEXT) as stream:
                async for event in stream:
                    frames.append(event.frame)
        finally:
            await tts.aclose()
        return frames, tts.sample_rate

    frames, rate = asyncio.run(run())
    assert frames and all(f.sample_rate == rate == 24000 and f.num_channels == 1 for f in frames)
    got = sum(f.samples_per_channel for f in frames)
    pcm = httpx.post(
        server.http + "/v1/audio/speech",
        json={"input": TEXT, "response_format": "pcm"},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    expected = len(pcm.content) // 2
    # mp3 adds at most its encoder delay and one frame of padding (1152 samples)
    assert expected <= got <= expected + 2 * 1152, (got, expected)


def test_pipecat_openai_service_with_its_defaults(
    server: RunningServer, reference: np.ndarray
) -> None:
    """Pipecat's OpenAITTSService (gpt-4o-mini-tts, voice alloy, 24 kHz pcm) in a
    pipeline with a frame collector: the audio is the server's pcm of the text."""
    from pipecat.frames.frames import EndFrame, Frame, TTSAudioRawFrame, TTSSpeakFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.openai.tts import OpenAITTSService
    from pipecat.workers.runner import WorkerRunner

    class Collector(FrameProcessor):
        def __init__(self) -> None:
            super().__init__()
            self.audio: list[TTSAudioRawFrame] = []

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame):
                self.audio.append(frame)
            await self.push_frame(frame, direction)

    async def run() -> list[TTSAudioRawFrame]:
        tts = OpenAITTSService(api_key=KEY, base_url=server.http + "/v1")
        collector = Collector()
        worker = PipelineWorker(
            Pipeline([tts, collector]),
            params=PipelineParams(audio_out_sample_rate=24000),
            cancel_on_idle_timeout=False,
        )
        started = asyncio.Event()

        @worker.event_handler("on_pipeline_started")
        async def _started(worker: PipelineWorker, frame: Frame) -> None:
            started.set()

        async def drive() -> None:
            await asyncio.wait_for(started.wait(), 10)
            await worker.queue_frame(TTSSpeakFrame(TEXT))
            while sum(len(f.audio) for f in collector.audio) < 2 * len(reference):
                await asyncio.sleep(0.05)
            await worker.queue_frame(EndFrame())

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        await asyncio.wait_for(asyncio.gather(runner.run(), drive()), 60)
        return collector.audio

    audio = asyncio.run(run())
    assert audio and all(f.sample_rate == 24000 and f.num_channels == 1 for f in audio)
    got = np.frombuffer(b"".join(f.audio for f in audio), "<i2")
    assert np.array_equal(got, reference)


@pytest.fixture(scope="module")
def tiny_mapped() -> Iterator[RunningServer]:
    config = replace(load_model_config("tiny"), openai_voices={"nova": "tiny-b"})
    with run_server(config) as running:
        yield running


def test_openai_voices_map_by_config(tiny_mapped: RunningServer) -> None:
    """nova -> tiny-b as configured; other OpenAI voices -> the default (tiny-a)."""
    client = openai.OpenAI(base_url=tiny_mapped.http + "/v1", api_key="x", max_retries=0)

    def speak(voice: str) -> bytes:
        return client.audio.speech.create(
            model="tts-1", voice=voice, input="Hi there.", response_format="pcm"
        ).content

    assert speak("nova") == speak("tiny-b") != speak("tiny-a")
    assert speak("alloy") == speak("tiny-a")


def test_openai_voice_names_are_refused_on_the_native_socket(tiny_mapped: RunningServer) -> None:
    """The aliases belong to the OpenAI endpoint: elsewhere a voice is the model's own."""
    from tests.wsclient import Client

    async def run() -> dict:
        ws = await Client.connect(tiny_mapped.ws)
        await ws.send(type="context.create", context_id="a", voice="alloy")
        error = await ws.until("error")
        await ws.close()
        return error

    error = asyncio.run(run())
    assert error["param"] == "voice" and "tiny-a" in error["message"]


def test_decoded_mp3_of_an_openai_default_request(client: openai.OpenAI) -> None:
    """OpenAI's default response format (mp3) with OpenAI's default names decodes."""
    response = client.audio.speech.create(model="gpt-4o-mini-tts", voice="coral", input=TEXT)
    assert response.response.headers["content-type"] == "audio/mpeg"
    with av.open(io.BytesIO(response.content)) as container:
        samples = sum(f.samples for f in container.decode(audio=0))
    assert samples > 24000  # over a second of speech
