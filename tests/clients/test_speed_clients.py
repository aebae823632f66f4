"""``speed`` (and ``instructions``) as OpenAI's clients send them, unchanged but for the
URL: the ``openai`` package, Pipecat's OpenAI TTS service and LiveKit's OpenAI TTS
plugin, against Piper (native up to 1, stretched above) and the tiny Qwen3-TTS
checkpoint (0.6B CustomVoice: stretched, no instructions) on loopback. Before, Qwen3
answered 400 to both, so these services failed against it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import openai
import pytest
from livekit.plugins import openai as lk_openai
from pipecat.frames.frames import ErrorFrame, TTSAudioRawFrame, TTSSpeakFrame, TTSStoppedFrame
from pipecat.pipeline.worker import PipelineWorker
from pipecat.services.openai.tts import OpenAITTSService

from tests.clients.test_pipecat_tts import Collector, run_pipeline
from tests.e2e.test_speed import QWEN_OPTIONS
from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.serving import RunningServer, run_server
from voiceserver.config import (
    ServerConfig,
    config_for_checkpoint,
    load_model_config,
    with_checkpoint,
)

TEXT = "Hello there, friend."
"""Short: the tiny Qwen3 checkpoint speaks until its text is done (random weights)."""
MP3_SLACK = 2 * 1152
"""Samples an mp3 may add: its encoder delay and one frame of padding."""


@pytest.fixture(scope="module")
def piper() -> Iterator[RunningServer]:
    config = load_model_config("piper-joe", {"noise_scale": 0, "noise_w_scale": 0})
    with run_server(config, ServerConfig()) as server:
        yield server


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("qwen3_speed_clients")
    checkpoint = build_checkpoint(
        root / "cv", BuildOptions(variant="custom_voice", size_name="0b6", seed=5)
    )
    config = with_checkpoint(config_for_checkpoint(checkpoint, QWEN_OPTIONS), checkpoint)
    with run_server(config, ServerConfig()) as server:
        yield server


@pytest.fixture(params=["piper", "qwen"])
def server(request: pytest.FixtureRequest) -> RunningServer:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def normal_samples(server: RunningServer) -> int:
    """TEXT at speed 1, as pcm, from the server."""
    body = {"input": TEXT, "response_format": "pcm"}
    response = httpx.post(f"{server.http}/v1/audio/speech", json=body, timeout=120)
    assert response.status_code == 200
    return len(response.content) // 2


def assert_speed(got: int, normal: int, speed: float, slack: int = 0) -> None:
    expected = normal / speed
    assert 0.95 * expected <= got <= 1.05 * expected + slack, (got, normal, speed)


def test_openai_sdk_create_and_streaming_response(server: RunningServer) -> None:
    client = openai.OpenAI(base_url=server.http + "/v1", api_key="unused", max_retries=0)
    normal = client.audio.speech.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="pcm"
    ).content
    fast = client.audio.speech.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="pcm", speed=2.0
    ).content
    assert_speed(len(fast) // 2, len(normal) // 2, 2.0)
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", voice="alloy", input=TEXT, response_format="pcm", speed=0.5
    ) as response:
        slow = b"".join(response.iter_bytes())
    assert_speed(len(slow) // 2, len(normal) // 2, 0.5)


def test_openai_sdk_out_of_range_speed_names_the_field(server: RunningServer) -> None:
    client = openai.OpenAI(base_url=server.http + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, speed=4.5)
    error = refused.value.body
    assert isinstance(error, dict) and error["param"] == "speed"
    assert "0.25" in error["message"] and "4.0" in error["message"]


def test_openai_sdk_instructions_come_back_as_a_warning(server: RunningServer) -> None:
    client = openai.OpenAI(base_url=server.http + "/v1", api_key="unused", max_retries=0)
    raw = client.audio.speech.with_raw_response.create(
        model="gpt-4o-mini-tts",
        voice="alloy",
        input=TEXT,
        response_format="pcm",
        instructions="Speak in a cheerful and positive tone.",
        speed=1.5,
    )
    assert raw.status_code == 200 and len(raw.content) > 0
    assert "instructions ignored" in raw.headers["warning"]


async def test_pipecat_openai_service_with_speed(server: RunningServer) -> None:
    normal = await asyncio.to_thread(normal_samples, server)
    for speed in (2.0, 0.5):
        settings = OpenAITTSService.Settings(speed=speed, instructions="Speak calmly.")
        tts = OpenAITTSService(api_key="unused", base_url=f"{server.http}/v1", settings=settings)
        collector = Collector()
        errors: list[str] = []

        async def drive(worker: PipelineWorker, collector: Collector = collector) -> None:
            await worker.queue_frame(TTSSpeakFrame(TEXT))
            while not collector.of(TTSStoppedFrame):
                await asyncio.sleep(0.02)

        await run_pipeline(tts, collector, 24000, drive, errors)  # type: ignore[arg-type]
        assert not errors and not collector.of(ErrorFrame)
        audio = collector.of(TTSAudioRawFrame)
        assert audio and all(f.sample_rate == 24000 for f in audio)  # type: ignore[attr-defined]
        got = sum(len(f.audio) for f in audio) // 2  # type: ignore[attr-defined]
        assert_speed(got, normal, speed)


async def test_livekit_openai_plugin_with_speed(server: RunningServer) -> None:
    """The plugin as an agent builds it (mp3 over SSE), with ``speed`` and instructions."""
    normal = await asyncio.to_thread(normal_samples, server)
    for speed in (2.0, 0.5):
        tts = lk_openai.TTS(
            base_url=server.http + "/v1",
            api_key="unused",
            speed=speed,
            instructions="Speak calmly.",
        )
        frames = []
        try:
            async with tts.synthesize(TEXT) as stream:
                async for event in stream:
                    frames.append(event.frame)
        finally:
            await tts.aclose()
        assert frames and all(f.sample_rate == 24000 for f in frames)
        got = sum(f.samples_per_channel for f in frames)
        assert_speed(got, normal, speed, MP3_SLACK)
