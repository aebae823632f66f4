"""LiveKit's Baseten plugin (``livekit-plugins-baseten``, ``TTS(model="qwen3-tts")``), as
its users run it with only the endpoint changed, against the vllm-omni socket
(``/v1/audio/speech/stream``) of a real server on loopback with an API key configured:
streaming with and without word timestamps (Piper, real speech), and its voice
messages (``register_voice``/``list_voices``) on a voice-cloning model (a tiny random
Qwen3-TTS Base checkpoint), then speaking in the registered voice."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from livekit.agents import APIConnectOptions, APIStatusError, tts
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT, TimedString
from livekit.agents.utils import is_given
from livekit.plugins import baseten
from livekit.plugins.baseten import qwen3_tts

from tests.e2e.test_compat_http_tasks import reference_wav
from tests.e2e.test_compat_vllm import OUT_RATE, VllmClient
from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.serving import RunningServer, run_server
from voiceserver.config import (
    ServerConfig,
    config_for_checkpoint,
    load_model_config,
    with_checkpoint,
)

KEY = "baseten-test-key"
TEXT = "Hello there, how are you today? I hope the weather is fine where you are."
NO_RETRY = APIConnectOptions(max_retry=0, timeout=10)


def endpoint(server: RunningServer) -> str:
    return f"ws://{server.host}:{server.port}/v1/audio/speech/stream"


@pytest.fixture(scope="module")
def piper_server() -> Iterator[RunningServer]:
    config = load_model_config("piper-joe", {"noise_scale": 0, "noise_w_scale": 0})
    with run_server(config, ServerConfig(api_keys=(KEY,))) as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """The plugin's HTTP session (outside an agent job it must be given one)."""
    async with aiohttp.ClientSession() as session:
        yield session


async def whole_text_samples(server: RunningServer, text: str) -> int:
    """Samples of ``text`` spoken as one request (vllm-omni's ``none`` split)."""
    client = await VllmClient.connect(server, additional_headers={"Authorization": f"Bearer {KEY}"})
    await client.send(type="session.config", response_format="pcm", split_granularity="none")
    [sentence] = (await client.speak([text])).sentences
    await client.close()
    return len(sentence.data) // 2


def words(text: str) -> list[str]:
    parts = text.split(" ")
    return [parts[0]] + [" " + p for p in parts[1:]]


async def speak(engine: tts.TTS, text: str) -> list[tts.SynthesizedAudio]:
    async with engine.stream(conn_options=NO_RETRY) as stream:
        for word in words(text):
            stream.push_text(word)
        stream.flush()
        stream.end_input()
        return [ev async for ev in stream]


def transcript_of(events: list[tts.SynthesizedAudio]) -> list[TimedString]:
    return [t for ev in events for t in ev.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])]


@pytest.mark.parametrize("word_timestamps", [False, True], ids=["audio", "timestamps"])
async def test_streaming_speech(
    piper_server: RunningServer, http: aiohttp.ClientSession, word_timestamps: bool
) -> None:
    """Binary 24 kHz PCM either way; with word timestamps (``timestamp_type: "word"``,
    ``timestamp_transport_strategy: "sync"``) the plugin reads each sentence's timings
    from its audio.done and pushes them as a timed transcript. Before, the audio came
    as base64 audio.chunk messages the plugin does not read: no audio frames at all."""
    engine = baseten.TTS(
        model="qwen3-tts",
        model_endpoint=endpoint(piper_server),
        api_key=KEY,
        voice="joe",
        task_type="CustomVoice",  # Piper has one named voice and cannot clone
        word_timestamps=word_timestamps,
        http_session=http,
    )
    try:
        events = await speak(engine, TEXT)
    finally:
        await engine.aclose()
    frames = [ev.frame for ev in events]
    assert frames and all(f.sample_rate == OUT_RATE and f.num_channels == 1 for f in frames)
    samples = sum(f.samples_per_channel for f in frames)
    # Cut into sentences where the words came: as long as the whole text spoken at once,
    # within 10 % (Piper's pauses between sentences differ a little).
    reference = await whole_text_samples(piper_server, TEXT)
    assert abs(samples - reference) < 0.1 * reference
    timed = transcript_of(events)
    if not word_timestamps:
        assert timed == []
        return
    # Every word once, in order, timed on the turn's timeline (the plugin adds each
    # sentence's offset to its sentence-relative times), inside the audio.
    assert [t.strip() for t in timed] == TEXT.split()
    starts = [t.start_time for t in timed]
    assert all(is_given(t.start_time) and is_given(t.end_time) for t in timed)
    assert starts == sorted(starts) and starts[0] < 0.5
    assert all(t.start_time <= t.end_time <= samples / OUT_RATE + 1e-3 for t in timed)
    # The second sentence's words start after the first sentence's last one ends.
    first_sentence = len(TEXT[: TEXT.index("?")].split())
    assert timed[first_sentence].start_time >= timed[first_sentence - 1].end_time


async def test_a_wrong_key_is_refused(
    piper_server: RunningServer, http: aiohttp.ClientSession
) -> None:
    engine = baseten.TTS(
        model="qwen3-tts",
        model_endpoint=endpoint(piper_server),
        api_key="not-the-key",
        voice="joe",
        task_type="CustomVoice",
        http_session=http,
    )
    try:
        with pytest.raises(APIStatusError) as refused:
            await speak(engine, "Hello.")
    finally:
        await engine.aclose()
    assert refused.value.status_code == 401


async def test_list_voices_of_a_model_without_clones(piper_server: RunningServer) -> None:
    listed = await qwen3_tts.list_voices(model_endpoint=endpoint(piper_server), api_key=KEY)
    assert listed["type"] == "voice.list.result"
    assert listed["voices"] == ["joe"] and listed["uploaded_voices"] == []


# -- voices: register, list, speak in it ---------------------------------------------------


@pytest.fixture(scope="module")
def clone_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("baseten_clone")
    checkpoint = build_checkpoint(root / "base", BuildOptions(variant="base", size_name="0b6"))
    config = with_checkpoint(config_for_checkpoint(checkpoint, {"max_frames": 40}), checkpoint)
    with run_server(config, ServerConfig(api_keys=(KEY,))) as server:
        yield server


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("baseten_ref") / "speaker.wav"
    path.write_bytes(reference_wav())
    return path


async def test_register_list_and_speak_in_a_voice(
    clone_server: RunningServer, reference: Path, http: aiohttp.ClientSession
) -> None:
    url = endpoint(clone_server)
    voice = await qwen3_tts.register_voice(
        model_endpoint=url,
        name="agent-voice",
        ref_audio_path=str(reference),
        ref_text="Hello, this is my voice.",
        api_key=KEY,
    )
    assert voice["name"] == "agent-voice" and voice["consent"] == "user_consent"
    assert voice["mime_type"] == "audio/wav" and voice["file_size"] == reference.stat().st_size
    assert voice["ref_text"] == "Hello, this is my voice." and voice["x_vector_only"] is False

    listed = await qwen3_tts.list_voices(model_endpoint=url, api_key=KEY)
    assert "agent-voice" in [v["name"] for v in listed["uploaded_voices"]]
    # The same store as the HTTP voices API.
    assert clone_server.runtime.voices.find("agent-voice") is not None

    # The plugin's defaults: task_type Base, the registered voice by name.
    engine = baseten.TTS(
        model="qwen3-tts",
        model_endpoint=url,
        api_key=KEY,
        voice="agent-voice",
        max_new_tokens=8,
        http_session=http,
    )
    try:
        events = await speak(engine, "Hello there.")
    finally:
        await engine.aclose()
    frames = [ev.frame for ev in events]
    assert frames and all(f.sample_rate == OUT_RATE for f in frames)
    assert sum(f.samples_per_channel for f in frames) > 0


@pytest.mark.parametrize(
    ("name", "says"),
    [("bad name!", "name"), ("agent-voice", "already")],
    ids=["bad-name", "taken"],
)
async def test_register_refusals_name_the_problem(
    clone_server: RunningServer, reference: Path, name: str, says: str
) -> None:
    url = endpoint(clone_server)
    if clone_server.runtime.voices.find("agent-voice") is None:
        await qwen3_tts.register_voice(
            model_endpoint=url, name="agent-voice", ref_audio_path=str(reference), api_key=KEY
        )
    with pytest.raises(RuntimeError) as refused:
        await qwen3_tts.register_voice(
            model_endpoint=url, name=name, ref_audio_path=str(reference), api_key=KEY
        )
    assert str(refused.value).startswith("voice.add failed: ")
    assert says in str(refused.value)


async def test_register_refuses_audio_that_is_not_audio(
    clone_server: RunningServer, tmp_path: Path
) -> None:
    bogus = tmp_path / "notes.wav"
    bogus.write_bytes(b"this is not a recording at all" * 10)
    with pytest.raises(RuntimeError) as refused:
        await qwen3_tts.register_voice(
            model_endpoint=endpoint(clone_server),
            name="bogus",
            ref_audio_path=str(bogus),
            api_key=KEY,
        )
    # The voices API's own check, naming the field as this client sent it.
    assert "audio_data" in str(refused.value) and "audio_sample" not in str(refused.value)
    assert clone_server.runtime.voices.find("bogus") is None
