"""A whole text longer than one context of the model can speak is spoken whole, as
several contexts one after another, never a 200 with no audio. Qwen3-TTS (tiny random
weights) holds a context's text and audio in one KV cache: here 96 positions (and at
most 24 frames a context), so one context speaks 48 characters whole."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.serving import RunningServer, run_server
from voiceserver.config import ServerConfig, config_for_checkpoint, with_checkpoint
from voiceserver.http.speech import text_pieces

OPTIONS = {"kv_capacity": 96, "max_frames": 24, "bench_ignore_eos": True}
TEXT = "word " * 60  # run-on text: no sentence end anywhere, longer than the KV cache


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("long_text")
    checkpoint = build_checkpoint(root / "cv", BuildOptions(variant="custom_voice", seed=3))
    config = with_checkpoint(config_for_checkpoint(checkpoint, OPTIONS), checkpoint)
    with run_server(config, ServerConfig()) as running:
        yield running


def test_text_is_cut_at_sentence_ends_then_clauses_then_spaces() -> None:
    text = "One two three. Four five, six seven eight nine ten eleven."
    assert text_pieces(text, 100) == [text]
    assert text_pieces(text, 30) == [
        "One two three.",
        "Four five,",
        "six seven eight nine ten",
        "eleven.",
    ]
    assert text_pieces(text, 14)[2:] == ["six seven", "eight nine ten", "eleven."]


def test_run_on_text_longer_than_a_context_is_spoken_whole(server: RunningServer) -> None:
    caps = server.runtime.model.capabilities
    assert caps.max_context_chars == 48
    voice = caps.voices[0].name
    body = {"input": TEXT, "voice": voice, "response_format": "pcm"}
    response = httpx.post(f"{server.http}/v1/audio/speech", json=body, timeout=300)
    assert response.status_code == 200
    audio = np.frombuffer(response.content, np.int16)
    # bench_ignore_eos: every context runs to its 24 frames, so the audio counts the
    # contexts: one per piece of at most 48 characters (nine words each).
    pieces = text_pieces(TEXT, 48)
    assert len(pieces) == 7 and all(len(p) <= 48 for p in pieces)
    rate = caps.sample_rate * 24000 // caps.sample_rate  # pcm comes at 24 kHz
    frames = len(audio) / (rate / 12.5)
    assert frames == pytest.approx(len(pieces) * 24, abs=1)


@pytest.mark.parametrize("api", ["cartesia", "elevenlabs"])
def test_other_apis_speak_run_on_text_whole(server: RunningServer, api: str) -> None:
    """Cartesia's /tts/bytes and ElevenLabs' /v1/text-to-speech, raw 24 kHz PCM."""
    voice = server.runtime.model.capabilities.voices[0].name
    if api == "cartesia":
        url = f"{server.http}/tts/bytes"
        body = {
            "model_id": "sonic-2",
            "transcript": TEXT,
            "voice": {"mode": "id", "id": voice},
            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000},
        }
    else:
        url = f"{server.http}/v1/text-to-speech/{voice}?output_format=pcm_24000"
        body = {"text": TEXT, "model_id": "eleven_flash_v2_5"}
    response = httpx.post(url, json=body, timeout=300)
    assert response.status_code == 200, response.text
    frames = len(np.frombuffer(response.content, np.int16)) / (24000 / 12.5)
    assert frames == pytest.approx(len(text_pieces(TEXT, 48)) * 24, abs=1)
