"""Fish Speech S2 Pro served end to end from a checkpoint directory (tiny random dual AR
and codec in S2 Pro's layout): the native socket, HTTP and the vllm-omni socket, the
default voice and cloned ones (inline and stored), and bad input."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from scipy.io import wavfile

from tests.models.chatterbox.ckpt_campplus import speechlike
from tests.models.fish_speech.ckpt import build_checkpoint
from tests.serving import RunningServer, run_server
from tests.vllm_session import vllm_session
from tests.wsclient import Client
from voiceserver.config import ModelConfig, ServerConfig, config_for_checkpoint, with_checkpoint

TEXT = "Hello there, friend. How are you?"
CAP = 6
"""Frames per turn at most."""
FRAME_SAMPLES = 2048
REF_TEXT = "The quick brown fox jumps."


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("fish") / "s2", seed=1, eos_gain=2.5)


@pytest.fixture(scope="module")
def config(checkpoint: Path) -> ModelConfig:
    return with_checkpoint(config_for_checkpoint(checkpoint, {"max_new_tokens": CAP}), checkpoint)


@pytest.fixture(scope="module")
def server(
    config: ModelConfig, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    voices = tmp_path_factory.mktemp("voices")
    with run_server(config, ServerConfig(voices_dir=voices)) as running:
        yield running


def wav_file(seconds: float, rate: int = 44_100, seed: int = 0) -> bytes:
    out = io.BytesIO()
    wavfile.write(out, rate, speechlike(seconds, seed, rate).astype(np.float32))
    return out.getvalue()


def test_config_is_picked_from_the_checkpoint(checkpoint: Path) -> None:
    config = config_for_checkpoint(checkpoint)
    assert config.family == "fish_speech" and config.name == "fish-speech-s2-pro"


async def speak(
    server: RunningServer, cid: str, voice: str = "default", **create: object
) -> tuple[np.ndarray, dict, Client]:
    """TEXT streamed word by word into one context; its PCM, context.done and client."""
    client = await Client.connect(server.ws)
    native = {"encoding": "pcm_s16le", "sample_rate": 44_100}
    await client.send(
        type="context.create", context_id=cid, voice=voice, output_format=native, **create
    )
    for i, word in enumerate(TEXT.split(" ")):
        await client.send(type="text.append", context_id=cid, text=word if i == 0 else " " + word)
    await client.send(type="context.end", context_id=cid)
    done = await client.until("context.done", cid, timeout=180)
    await client.close()
    return np.frombuffer(bytes(client.got.audio[cid]), np.int16), done, client


async def test_websocket_streams_44k_audio_and_a_seed_repeats(server: RunningServer) -> None:
    audio, done, client = await speak(server, "a", temperature=0.8, seed=5)
    frames = done["usage"]["frames"]
    assert frames > 0 and len(audio) == frames * FRAME_SAMPLES
    assert np.abs(audio).max() > 100
    again, _, _ = await speak(server, "b", temperature=0.8, seed=5)
    assert np.array_equal(again, audio)
    other, _, _ = await speak(server, "c", temperature=0.8, seed=6)
    assert not np.array_equal(other[: len(audio)], audio[: len(other)])


async def test_http_speech_at_the_native_rate_and_others(server: RunningServer) -> None:
    async with httpx.AsyncClient(timeout=180) as http:
        body = {"input": TEXT, "voice": "default", "response_format": "pcm", "seed": 1}
        native = await http.post(
            f"{server.http}/v1/audio/speech", json={**body, "sample_rate": 44_100}
        )
        assert native.status_code == 200, native.text
        samples = len(native.content) // 2
        assert samples > 0 and samples % FRAME_SAMPLES == 0
        low = await http.post(
            f"{server.http}/v1/audio/speech", json={**body, "sample_rate": 16_000}
        )
        assert low.status_code == 200, low.text
        assert abs(len(low.content) // 2 - samples * 16_000 / 44_100) < 64


async def test_cloned_voices_inline_stored_and_over_vllm(server: RunningServer) -> None:
    """A voice uploaded once with its transcript speaks by name exactly as the same
    reference sent inline; vllm-omni's Base-task clients (task_type, ref_audio,
    ref_text) get it too."""
    ref = wav_file(3.0, seed=3)
    ref_b64 = base64.b64encode(ref).decode()
    async with httpx.AsyncClient(base_url=server.http, timeout=180) as http:
        files = {"audio_sample": ("ref.wav", ref, "audio/wav")}
        created = await http.post(
            "/v1/audio/voices", data={"name": "Narrator", "ref_text": REF_TEXT}, files=files
        )
        assert created.status_code == 200, created.text
        listing = (await http.get("/v1/audio/voices")).json()
        assert {"Narrator", "clone", "default"} <= set(listing["voices"])
    named, _, _ = await speak(server, "n", voice="Narrator", seed=2)
    inline, _, _ = await speak(
        server, "i", voice="clone", ref_audio=ref_b64, ref_text=REF_TEXT, seed=2
    )
    plain, _, _ = await speak(server, "d", seed=2)
    assert np.array_equal(named, inline) and np.abs(named).max() > 100
    assert not np.array_equal(named[: len(plain)], plain[: len(named)])
    by_name = await vllm_session(server, {"voice": "Narrator", "seed": 2}, TEXT)
    base = {"task_type": "Base", "ref_audio": ref_b64, "ref_text": REF_TEXT, "seed": 2}
    assert await vllm_session(server, base, TEXT) == by_name
    assert by_name[:4] == b"RIFF" and len(by_name) > 44


async def test_bad_input_names_the_field_and_the_socket_keeps_working(
    server: RunningServer,
) -> None:
    client = await Client.connect(server.ws)
    await client.send(type="context.create", context_id="x", voice="nobody")
    error = await client.until("error")
    assert error["code"] == "unknown_voice" and error["param"] == "voice"
    ref_b64 = base64.b64encode(wav_file(2.0)).decode()
    await client.send(type="context.create", context_id="y", voice="clone", ref_audio=ref_b64)
    error = await client.until("error")
    assert error["param"] == "ref_text"
    bad = base64.b64encode(b"not audio at all").decode()
    await client.send(
        type="context.create", context_id="z", voice="clone", ref_audio=bad, ref_text="Hi."
    )
    error = await client.until("error")
    assert error["param"] == "ref_audio"
    short = base64.b64encode(wav_file(0.3)).decode()
    await client.send(
        type="context.create", context_id="s", voice="clone", ref_audio=short, ref_text="Hi."
    )
    error = await client.until("error")
    assert error["param"] == "ref_audio" and "short" in error["message"]
    await client.send(type="context.create", context_id="t", voice="default", seed=1)
    await client.send(type="text.append", context_id="t", text="Hello <|im_end|> there.")
    await client.send(type="context.end", context_id="t")
    error = await client.until("error")
    assert error["param"] in ("input", "text") and "<|im_end|>" in error["message"]
    # The same socket still speaks.
    await client.send(type="context.create", context_id="ok", voice="default", seed=1)
    await client.send(type="text.append", context_id="ok", text="Fine words.")
    await client.send(type="context.end", context_id="ok")
    done = await client.until("context.done", "ok", timeout=180)
    assert done["usage"]["frames"] > 0
    await client.close()


async def test_a_turn_at_its_frame_cap_is_said_once(server: RunningServer) -> None:
    """Every turn stopped at one frame (max_new_tokens=1): the context ends with its
    audio and one max_frames_reached warning."""
    audio, done, client = await speak(server, "cap", seed=4, max_new_tokens=1)
    assert [w["code"] for w in client.got.of_type("warning")] == ["max_frames_reached"]
    assert 0 < done["usage"]["frames"] <= 3 and len(audio) == done["usage"]["frames"] * 2048
