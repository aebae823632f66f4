"""``speed`` 0.25-4.0 on every model and endpoint, and ``instructions`` a model cannot
use served with a warning, over real sockets.

Piper makes speeds up to 1 itself and the server time-stretches faster ones; the tiny
Qwen3-TTS checkpoints (0.6B CustomVoice and Base: no speed, no instructions) and
Chatterbox (tiny T3) are stretched at every speed. Durations are checked against speed 1 (within 5%), pitch against speed 1
with an autocorrelation pitch tracker written here (a resampled "speed" would move it
by the speed factor), word timestamps against the audio they describe.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import websockets

from tests.models.chatterbox.ckpt_full import build_checkpoint as build_chatterbox
from tests.models.qwen3_tts.ckpt import BuildOptions, Sizes, build_checkpoint
from tests.serving import RunningServer, run_server
from tests.wsclient import Client
from voiceserver.config import (
    ServerConfig,
    config_for_checkpoint,
    load_model_config,
    with_checkpoint,
)

TEXT = "Hello there, how are you today? The quick brown fox jumps over the lazy dog."
RATE = 24000
"""What every endpoint sends here (HTTP's pcm, the native socket's default)."""
QWEN_TEXT = "Hello there."
QWEN_OPTIONS = {"max_frames": 12, "temperature": 0, "subtalker_temperature": 0}
"""Greedy, so a text's frames are the same at every speed; random weights never stop
on their own, so every utterance is ``max_frames`` long."""


# -- measuring -----------------------------------------------------------------------


def pitch_track(pcm: np.ndarray, rate: int = RATE) -> tuple[np.ndarray, np.ndarray]:
    """Times (s) and pitches (Hz, NaN where unvoiced) of 30 ms frames every 5 ms: the lag
    of the normalized autocorrelation's highest peak between 60 and 350 Hz, where that
    peak is over 0.8 and the frame is not quiet."""
    x = pcm.astype(np.float64)
    win, hop = int(0.03 * rate), int(0.005 * rate)
    lags = np.arange(int(rate / 350), int(rate / 60))
    level = np.sqrt(np.mean(x**2))
    times, found = [], []
    for start in range(0, len(x) - win - lags[-1], hop):
        w = x[start : start + win + lags[-1]]
        head = w[:win] - w[:win].mean()
        times.append((start + win / 2) / rate)
        if np.sqrt(np.mean(head**2)) < 0.3 * level:
            found.append(np.nan)
            continue
        shifted = np.stack([w[lag : lag + win] for lag in lags])
        shifted -= shifted.mean(axis=1, keepdims=True)
        r = shifted @ head / np.sqrt((shifted**2).sum(axis=1) * (head @ head) + 1e-20)
        best = int(np.argmax(r))
        found.append(rate / lags[best] if r[best] > 0.8 else np.nan)
    return np.asarray(times), np.asarray(found)


def pitch_ratios(normal: np.ndarray, other: np.ndarray, speed: float) -> np.ndarray:
    """``other``'s pitch over ``normal``'s at the same point of the speech: a frame at
    ``t`` in audio at ``speed`` is compared with the frame at ``t * speed`` in ``normal``."""
    times, plain = pitch_track(normal)
    other_times, got = pitch_track(other)
    nearest = np.clip(np.rint((other_times * speed - times[0]) / 0.005).astype(int), 0, None)
    paired = plain[np.minimum(nearest, len(plain) - 1)]
    voiced = ~np.isnan(got) & ~np.isnan(paired)
    return got[voiced] / paired[voiced]


def samples(data: bytes) -> np.ndarray:
    return np.frombuffer(data, "<i2").astype(np.float32) / 32768


def assert_length(got: int, normal: int, speed: float) -> None:
    assert abs(got * speed / normal - 1) < 0.05, (got, normal, speed)


def speech(server: RunningServer, speed: float, **body: Any) -> httpx.Response:
    body = {"input": TEXT, "response_format": "pcm", "speed": speed, **body}
    return httpx.post(f"{server.http}/v1/audio/speech", json=body, timeout=120)


async def socket_context(
    server: RunningServer, speed: float, pieces: list[str], **create: Any
) -> Client:
    """One native-socket context: each piece but the last is flushed apart."""
    client = await Client.connect(server.ws)
    await client.send(type="context.create", context_id="c", speed=speed, **create)
    for i, piece in enumerate(pieces):
        await client.send(type="text.append", context_id="c", text=piece)
        if i < len(pieces) - 1:
            await client.send(type="context.flush", context_id="c", flush_id=f"f{i}")
    await client.send(type="context.end", context_id="c")
    await client.until("context.done", "c", timeout=120)
    await client.close()
    return client


async def vllm_audio(server: RunningServer, speed: float, text: str = TEXT, **config: Any) -> bytes:
    """vllm-omni's socket as its clients drive it: the utterance's pcm."""
    url = f"ws://{server.host}:{server.port}/v1/audio/speech/stream"
    audio = bytearray()
    async with websockets.connect(url, max_size=None) as ws:
        await ws.send(
            json.dumps(
                {"type": "session.config", "response_format": "pcm", "speed": speed, **config}
            )
        )
        await ws.send(json.dumps({"type": "input.text", "text": text}))
        await ws.send(json.dumps({"type": "input.done"}))
        while True:
            data = await ws.recv()
            if isinstance(data, bytes):
                audio += data
                continue
            message = json.loads(data)
            assert message["type"] != "error", message
            if message["type"] == "session.done":
                return bytes(audio)


# -- servers -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def piper() -> Iterator[RunningServer]:
    config = load_model_config("piper-joe", {"noise_scale": 0, "noise_w_scale": 0})
    with run_server(config, ServerConfig()) as server:
        yield server


@pytest.fixture(scope="module")
def piper_normal(piper: RunningServer) -> np.ndarray:
    response = speech(piper, 1.0)
    assert response.status_code == 200
    return samples(response.content)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("qwen3_speed")
    checkpoint = build_checkpoint(
        root / "cv", BuildOptions(variant="custom_voice", size_name="0b6", seed=5)
    )
    config = with_checkpoint(config_for_checkpoint(checkpoint, QWEN_OPTIONS), checkpoint)
    with run_server(config, ServerConfig()) as server:
        yield server


@pytest.fixture(scope="module")
def qwen_base(base_checkpoint: Path) -> Iterator[RunningServer]:
    config = with_checkpoint(config_for_checkpoint(base_checkpoint, QWEN_OPTIONS), base_checkpoint)
    with run_server(config, ServerConfig()) as server:
        yield server


@pytest.fixture(scope="module")
def chatterbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    checkpoint = build_chatterbox(tmp_path_factory.mktemp("chatterbox_speed") / "turbo", seed=1)
    # Random weights never say stop: every clause is max_new_tokens long.
    config = config_for_checkpoint(checkpoint, {"max_new_tokens": 8})
    with run_server(with_checkpoint(config, checkpoint), ServerConfig()) as server:
        yield server


# -- Piper ---------------------------------------------------------------------------


@pytest.mark.parametrize("speed", [0.25, 0.5, 0.75, 1.5, 2.0, 3.0, 4.0])
def test_piper_audio_lasts_one_over_speed(
    piper: RunningServer, piper_normal: np.ndarray, speed: float
) -> None:
    response = speech(piper, speed)
    assert response.status_code == 200 and "warning" not in response.headers
    assert_length(len(response.content) // 2, len(piper_normal), speed)


@pytest.mark.parametrize("speed", [0.5, 1.5, 2.0])
def test_piper_pitch_is_unchanged(
    piper: RunningServer, piper_normal: np.ndarray, speed: float
) -> None:
    ratios = pitch_ratios(piper_normal, samples(speech(piper, speed).content), speed)
    assert len(ratios) >= 30
    # Measured: medians 1.000-1.007, 95-100% of frames within 10%. Decimating the
    # audio to go twice as fast gives 2.0 and none.
    assert abs(np.median(ratios) - 1) < 0.03, np.median(ratios)
    assert np.mean(np.abs(ratios - 1) < 0.1) > 0.8


def test_the_pitch_check_sees_a_resampled_speed(piper_normal: np.ndarray) -> None:
    ratios = pitch_ratios(piper_normal, piper_normal[::2], 2.0)
    assert abs(np.median(ratios) - 2) < 0.05


@pytest.mark.parametrize("speed", [0.5, 2.0])
async def test_piper_socket_times_and_flushes_follow_speed(
    piper: RunningServer, speed: float
) -> None:
    """Native (0.5) and stretched (2.0): word times, flush points and the context's
    length scale as 1/speed, and every word lies in the audio the client got."""
    pieces = ["Hello there, how are you today?", " The quick brown fox jumps over the lazy dog."]
    runs = {}
    for each in (1.0, speed):
        client = await socket_context(piper, each, pieces, timestamps="word")
        audio_ms = len(client.got.audio["c"]) / 2 / RATE * 1000
        done = client.got.of_type("context.done")[0]
        flushed = client.got.of_type("context.flushed")[0]
        words = [w for m in client.got.of_type("timestamps") for w in m["words"]]
        assert abs(done["audio_ms"] - audio_ms) <= 1
        assert [w["text"] for w in words] == TEXT.split()
        assert all(0 <= w["start_ms"] <= w["end_ms"] <= audio_ms + 1 for w in words)
        runs[each] = (audio_ms, flushed["audio_ms"], words)
    (normal_ms, normal_flush, normal_words), (ms, flush, words) = runs[1.0], runs[speed]
    assert_length(round(ms), round(normal_ms), speed)
    # A flush point is exact: stretched at 2x, to the millisecond (the filter is drained).
    assert abs(flush - normal_flush / speed) <= 2 + 12 / speed
    for plain, timed in zip(normal_words, words, strict=True):
        # Native: whole frames (11.6 ms) rounded per word; stretched: the times scaled.
        assert abs(timed["start_ms"] - plain["start_ms"] / speed) <= 25
        assert abs(timed["end_ms"] - plain["end_ms"] / speed) <= 25


async def test_piper_vllm_socket_follows_speed(
    piper: RunningServer, piper_normal: np.ndarray
) -> None:
    for speed in (0.5, 2.0):
        audio = await vllm_audio(piper, speed)
        assert_length(len(audio) // 2, len(piper_normal), speed)


# -- Qwen3-TTS (tiny, 0.6B: no speed, no instructions) --------------------------------


def test_qwen3_http_is_stretched_at_any_speed(qwen: RunningServer) -> None:
    normal = speech(qwen, 1.0, input=QWEN_TEXT)
    assert normal.status_code == 200
    for speed in (0.25, 2.0, 4.0):
        response = speech(qwen, speed, input=QWEN_TEXT)
        assert response.status_code == 200, response.text
        # Greedy: the same frames at every speed, and the stretch's length is exact.
        assert len(response.content) // 2 == round(len(normal.content) // 2 / speed)


async def test_qwen3_sockets_are_stretched(qwen: RunningServer) -> None:
    # All the text in the prompt: streamed text would reach the model at a moment
    # that varies from run to run, and greedy frames with it.
    normal = await socket_context(qwen, 1.0, [QWEN_TEXT], streaming_text=False)
    fast = await socket_context(qwen, 2.0, [QWEN_TEXT], streaming_text=False)
    assert len(fast.got.audio["c"]) // 2 == round(len(normal.got.audio["c"]) // 2 / 2.0)
    plain = await vllm_audio(qwen, 1.0, text=QWEN_TEXT)
    slow = await vllm_audio(qwen, 0.5, text=QWEN_TEXT)
    assert_length(len(slow) // 2, len(plain) // 2, 0.5)


# -- what is refused, what is warned about --------------------------------------------


@pytest.mark.parametrize("speed", [0.2, 4.5, 0])
async def test_speed_out_of_range_is_refused_naming_the_field(
    piper: RunningServer, speed: float
) -> None:
    response = speech(piper, speed)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "speed" and "0.25" in error["message"] and "4.0" in error["message"]
    client = await Client.connect(piper.ws)
    await client.send(type="context.create", context_id="x", speed=speed)
    refused = await client.until("error")
    await client.close()
    assert refused["param"] == "speed" and refused["code"] == "invalid_field"
    url = f"ws://{piper.host}:{piper.port}/v1/audio/speech/stream"
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"type": "session.config", "speed": speed}))
        message = json.loads(await ws.recv())
    assert message["type"] == "error" and "speed" in message["message"]


def clone_fields() -> dict[str, Any]:
    return {"speaker_embedding": [0.05] * Sizes().hidden}


@pytest.mark.parametrize("which", ["piper", "qwen", "qwen_base"])
async def test_instructions_a_model_cannot_use_are_a_warning(
    which: str, request: pytest.FixtureRequest
) -> None:
    server: RunningServer = request.getfixturevalue(which)
    extra = clone_fields() if which == "qwen_base" else {}
    response = speech(server, 1.0, input="Hello there.", instructions="Speak calmly.", **extra)
    assert response.status_code == 200, response.text
    assert len(response.content) > 0
    warning = response.headers["warning"]
    assert warning.startswith("299 - ") and "instructions" in warning
    client = await socket_context(server, 1.0, ["Hello there."], instructions="calm", **extra)
    warned = [w for w in client.got.of_type("warning") if "instructions" in w["message"]]
    assert len(warned) == 1
    assert warned[0]["context_id"] == "c" and warned[0]["code"] == "unsupported_value"
    assert client.got.audio["c"] and client.got.of_type("context.done")


def test_chatterbox_is_stretched_and_warns_about_instructions(chatterbox: RunningServer) -> None:
    body = {"input": "Hello there, friend.", "voice": "default", "temperature": 0}
    normal = speech(chatterbox, 1.0, **body)
    assert normal.status_code == 200 and "warning" not in normal.headers
    for speed in (0.5, 3.0):
        response = speech(chatterbox, speed, instructions="Whisper.", **body)
        assert response.status_code == 200, response.text
        assert "instructions ignored" in response.headers["warning"]
        assert len(response.content) // 2 == round(len(normal.content) // 2 / speed)
