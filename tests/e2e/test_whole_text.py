"""A whole text sent at once sounds like the model's own one-shot synthesis.

Piper: the text is cut at sentence ends only (no clause cuts), so the HTTP answer
equals piper's own synthesis of the whole text; text streamed word by word still
gets its first clause spoken before the sentence ends. Qwen3-TTS CustomVoice: a
whole text with no mode asked is generated in the reference package's default
non-streaming mode; ``non_streaming_mode: false`` still picks streaming mode.
"""

from __future__ import annotations

import io
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from piper import PiperVoice

from models.qwen3_tts.voices import ISO_LANGUAGES
from tests.e2e.test_piper_speech import one_shot, piper_server, snr_db, voice
from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.models.qwen3_tts.reference import ReferenceRun, require_reference, run_reference
from tests.serving import RunningServer, run_server
from tests.wsclient import Client
from voiceserver.config import (
    ServerConfig,
    config_for_checkpoint,
    with_checkpoint,
)

__all__ = ["piper_server", "voice"]  # fixtures shared with test_piper_speech

WHOLE_TEXTS = [
    "Then it runs back into the forest to find its friends, before the sun goes down!",
    "Hello there, how are you today? I hope, if you have the time, that all is well.",
    "Well, this text has no final stop, and it is still spoken as one sentence",
]


# -- Piper -------------------------------------------------------------------------------


def wav_samples(data: bytes) -> tuple[int, np.ndarray]:
    with wave.open(io.BytesIO(data)) as wav:
        assert wav.getnchannels() == 1 and wav.getsampwidth() == 2
        pcm = wav.readframes(wav.getnframes())
        return wav.getframerate(), np.frombuffer(pcm, "<i2").astype(np.float32) / 32767.0


@pytest.mark.parametrize("text", WHOLE_TEXTS)
def test_http_whole_text_equals_piper_one_shot(
    piper_server: RunningServer, voice: PiperVoice, text: str
) -> None:
    client = openai.OpenAI(base_url=piper_server.http + "/v1", api_key="x", max_retries=0)
    response = client.audio.speech.create(
        model="tts-1",
        voice="alloy",
        input=text,
        response_format="wav",
        extra_body={"sample_rate": voice.config.sample_rate, "stream": False},
    )
    rate, got = wav_samples(response.read())
    want = one_shot(voice, text)
    assert rate == voice.config.sample_rate
    assert len(got) == len(want)
    assert snr_db(want, got) >= 60.0


async def test_native_socket_one_append_equals_piper_one_shot(
    piper_server: RunningServer, voice: PiperVoice
) -> None:
    text = WHOLE_TEXTS[0]
    client = await Client.connect(piper_server.ws)
    fmt = {"encoding": "pcm_s16le", "sample_rate": voice.config.sample_rate}
    await client.send(type="context.create", context_id="w", output_format=fmt)
    await client.send(type="text.append", context_id="w", text=text)
    await client.send(type="context.end", context_id="w")
    await client.until("context.done", "w")
    await client.close()
    got = np.frombuffer(bytes(client.got.audio["w"]), "<i2").astype(np.float32) / 32767.0
    want = one_shot(voice, text)
    assert len(got) == len(want)
    assert snr_db(want, got) >= 60.0


async def test_vllm_socket_one_input_text_equals_piper_one_shot(
    piper_server: RunningServer, voice: PiperVoice
) -> None:
    from tests.e2e.test_compat_vllm import VllmClient

    text = WHOLE_TEXTS[1]
    client = await VllmClient.connect(piper_server)
    rate = voice.config.sample_rate
    await client.send(type="session.config", response_format="pcm", sample_rate=rate)
    utterance = await client.speak([text])
    await client.close()
    assert [s.start["sentence_text"] for s in utterance.sentences] == [
        "Hello there, how are you today?",
        "I hope, if you have the time, that all is well.",
    ]
    pcm = b"".join(s.data for s in utterance.sentences)
    got = np.frombuffer(pcm, "<i2").astype(np.float32) / 32767.0
    want = one_shot(voice, text)
    assert len(got) == len(want)
    assert snr_db(want, got) >= 60.0


async def test_streamed_words_still_speak_the_first_clause_early(
    piper_server: RunningServer, voice: PiperVoice
) -> None:
    text = WHOLE_TEXTS[0]
    clause = text[: text.index(",") + 1]
    client = await Client.connect(piper_server.ws)
    fmt = {"encoding": "pcm_s16le", "sample_rate": voice.config.sample_rate}
    await client.send(type="context.create", context_id="s", output_format=fmt)
    words = text.split(" ")
    sent = 0
    for i, word in enumerate(words):
        await client.send(type="text.append", context_id="s", text=word if i == 0 else " " + word)
        sent += len(word) + (i > 0)
        if sent > len(clause):
            break  # one word past the comma: the sentence's end has not been sent
    # Audio comes while the sentence is unfinished: its first clause went ahead.
    await client.until_audio("s", timeout=30)
    rest = " " + " ".join(words[i + 1 :])
    await client.send(type="text.append", context_id="s", text=rest)
    await client.send(type="context.end", context_id="s")
    await client.until("context.done", "s")
    await client.close()
    got = np.frombuffer(bytes(client.got.audio["s"]), "<i2").astype(np.float32) / 32767.0
    want = np.concatenate([one_shot(voice, clause), one_shot(voice, text[len(clause) + 1 :])])
    assert len(got) == len(want)
    assert snr_db(want, got) >= 60.0


# -- Qwen3-TTS CustomVoice ---------------------------------------------------------------

QWEN_TEXT = "The quick brown fox, quite tired, jumps over the lazy dog. Then it rests."
FRAMES = 30
SPEAKER = "ryan"


@pytest.fixture(scope="module")
def cv_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("whole_text_cv")
    return build_checkpoint(root / "cv", BuildOptions(variant="custom_voice", size_name="1b7"))


@pytest.fixture(scope="module")
def reference(cv_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> ReferenceRun:
    """The reference package's own greedy generation of the text, in both modes."""
    require_reference()
    task: dict[str, Any] = {
        "kind": "generate",
        "text": QWEN_TEXT,
        "language": ISO_LANGUAGES["en"],
        "speaker": SPEAKER,
        "max_new_tokens": FRAMES + 1,  # the reference drops its last token
        "greedy": True,
    }
    tasks = [
        task | {"id": "whole", "non_streaming_mode": True},
        task | {"id": "streaming", "non_streaming_mode": False},
    ]
    return run_reference(cv_checkpoint, tasks, tmp_path_factory.mktemp("whole_ref"))


@pytest.fixture(scope="module")
def cv_server(cv_checkpoint: Path) -> Iterator[RunningServer]:
    config = with_checkpoint(config_for_checkpoint(cv_checkpoint), cv_checkpoint)
    with run_server(config, ServerConfig()) as server:
        yield server


def speak_http(server: RunningServer, **extra: Any) -> np.ndarray:
    body = {
        "input": QWEN_TEXT,
        "voice": SPEAKER,
        "language": "en",
        "response_format": "pcm",
        "temperature": 0,
        "max_new_tokens": FRAMES,
        **extra,
    }
    response = httpx.post(server.http + "/v1/audio/speech", json=body, timeout=300)
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, "<i2").astype(np.float32) / 32768.0


@pytest.mark.parametrize(
    ("extra", "mode"),
    [({}, "whole"), ({"non_streaming_mode": False}, "streaming")],
    ids=["default-is-non-streaming", "explicit-streaming"],
)
def test_custom_voice_whole_text_follows_the_reference_mode(
    cv_server: RunningServer, reference: ReferenceRun, extra: dict[str, Any], mode: str
) -> None:
    got = speak_http(cv_server, **extra)
    want = reference.array(f"{mode}.wav")
    other = reference.array(f"{'streaming' if mode == 'whole' else 'whole'}.wav")
    # The two modes give different speech, so matching one says which mode ran.
    assert want.shape != other.shape or np.abs(want - other).max() > 1e-2
    assert np.abs(want).max() > 0.01 and len(want) % 1920 == 0
    assert got.shape == want.shape
    assert np.abs(got - want).max() < 2e-4  # the reference's decode, within s16 rounding
