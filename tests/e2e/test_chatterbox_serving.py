"""Chatterbox Turbo served end to end from a checkpoint directory (a tiny T3, real-size
random S3Gen): the native socket, the vllm-omni socket and HTTP."""

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
from tests.models.chatterbox.ckpt_full import build_checkpoint
from tests.serving import RunningServer, run_server
from tests.vllm_session import vllm_session
from tests.wsclient import Client
from voiceserver.config import ModelConfig, ServerConfig, config_for_checkpoint, with_checkpoint

TEXT = "Hello there, friend."
CAP = 8
"""Speech tokens per clause: random weights never say stop."""
TOKEN_SAMPLES = 960


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("chatterbox") / "turbo", seed=1)


@pytest.fixture(scope="module")
def config(checkpoint: Path) -> ModelConfig:
    return with_checkpoint(config_for_checkpoint(checkpoint, {"max_new_tokens": CAP}), checkpoint)


@pytest.fixture(scope="module")
def server(config: ModelConfig) -> Iterator[RunningServer]:
    with run_server(config, ServerConfig()) as running:
        yield running


def test_config_is_picked_from_the_checkpoint(checkpoint: Path) -> None:
    config = config_for_checkpoint(checkpoint)
    assert config.family == "chatterbox" and config.name == "chatterbox-turbo"


async def speak(
    server: RunningServer, cid: str, voice: str = "default", **create: object
) -> tuple[np.ndarray, dict]:
    client = await Client.connect(server.ws)
    await client.send(type="context.create", context_id=cid, voice=voice, **create)
    for i, word in enumerate(TEXT.split(" ")):
        await client.send(type="text.append", context_id=cid, text=word if i == 0 else " " + word)
    await client.send(type="context.end", context_id=cid)
    done = await client.until("context.done", cid, timeout=180)
    await client.close()
    # Random weights never say stop: every clause reaches the cap, which is said once.
    assert [w["code"] for w in client.got.of_type("warning")] == ["max_frames_reached"]
    return np.frombuffer(bytes(client.got.audio[cid]), np.int16), done


async def test_websocket_streams_and_a_seed_repeats(server: RunningServer) -> None:
    audio, done = await speak(server, "a", temperature=0, seed=5)
    frames = done["usage"]["frames"]
    # Each clause: up to CAP tokens, then the three silence tokens, 960 samples each.
    assert frames > 0 and len(audio) == frames * TOKEN_SAMPLES
    assert np.abs(audio[:480]).max() == 0 and np.abs(audio).max() > 100  # faded in, not silent
    again, _ = await speak(server, "b", temperature=0, seed=5)
    assert np.array_equal(again, audio)


async def test_http_speech(server: RunningServer) -> None:
    async with httpx.AsyncClient(timeout=180) as http:
        body = {"input": TEXT, "voice": "default", "response_format": "pcm", "temperature": 0}
        response = await http.post(f"{server.http}/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    assert len(response.content) > 0 and len(response.content) % (TOKEN_SAMPLES * 2) == 0


async def test_vllm_socket(server: RunningServer) -> None:
    audio = await vllm_session(server, {"voice": "default"}, TEXT)
    assert audio[:4] == b"RIFF" and len(audio) > 44


async def test_unknown_voice_and_bad_sampling_are_errors(server: RunningServer) -> None:
    client = await Client.connect(server.ws)
    await client.send(type="context.create", context_id="bad", voice="nobody")
    error = await client.until("error")
    assert error["code"] == "unknown_voice" and error["param"] == "voice"
    await client.send(type="context.create", context_id="hot", voice="default", temperature=7)
    error = await client.until("error")
    assert error["code"] == "invalid_field" and error["param"] == "temperature"
    await client.close()


def wav_file(seconds: float, rate: int = 24_000, seed: int = 0) -> bytes:
    out = io.BytesIO()
    wavfile.write(out, rate, speechlike(seconds, seed, rate).astype(np.float32))
    return out.getvalue()


async def test_a_cloned_voice_speaks_by_name_and_inline(
    config: ModelConfig, tmp_path: Path
) -> None:
    """A voice uploaded once (POST /v1/audio/voices) speaks by name over the socket and
    HTTP, exactly as the same reference audio sent inline with the request; reference
    audio the model cannot clone from is refused naming the field."""
    ref = wav_file(6.0, 22_050, seed=3)
    with run_server(config, ServerConfig(voices_dir=tmp_path)) as server:
        async with httpx.AsyncClient(base_url=server.http, timeout=180) as http:
            files = {"audio_sample": ("ref.wav", ref, "audio/wav")}
            created = await http.post("/v1/audio/voices", data={"name": "Narrator"}, files=files)
            assert created.status_code == 200, created.text
            listing = (await http.get("/v1/audio/voices")).json()
            assert {"Narrator", "clone", "default"} <= set(listing["voices"])

            named, _ = await speak(server, "n", voice="Narrator", temperature=0, seed=2)
            inline_b64 = base64.b64encode(ref).decode()
            inline, _ = await speak(
                server, "i", voice="clone", ref_audio=inline_b64, seed=2, temperature=0
            )
            builtin, _ = await speak(server, "d", temperature=0, seed=2)
            assert np.array_equal(named, inline) and np.abs(named).max() > 100
            assert not np.array_equal(named[: len(builtin)], builtin[: len(named)])

            # vllm-omni's socket: the stored voice by name, and the audio inline as its
            # Base-task clients send it.
            by_name = await vllm_session(server, {"voice": "Narrator", "seed": 2}, TEXT)
            inline_cfg = {"task_type": "Base", "ref_audio": inline_b64, "seed": 2}
            assert await vllm_session(server, inline_cfg, TEXT) == by_name

            body = {"input": TEXT, "voice": "Narrator", "response_format": "pcm", "temperature": 0}
            spoken = await http.post("/v1/audio/speech", json=body)
            assert spoken.status_code == 200, spoken.text
            assert len(spoken.content) > 0 and len(spoken.content) % (TOKEN_SAMPLES * 2) == 0

            short = {"audio_sample": ("short.wav", wav_file(3.0), "audio/wav")}
            refused = await http.post("/v1/audio/voices", data={"name": "Short"}, files=short)
            assert refused.status_code == 400
            error = refused.json()["error"]
            assert error["param"] == "audio_sample" and "too short" in error["message"]
            body = {**body, "voice": "clone", "ref_audio": base64.b64encode(b"not audio").decode()}
            bad = await http.post("/v1/audio/speech", json=body)
            assert bad.status_code == 400 and bad.json()["error"]["param"] == "ref_audio"
