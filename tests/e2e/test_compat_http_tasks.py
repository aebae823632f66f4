"""vllm-omni's ``task_type`` checked against the loaded Qwen3-TTS variant (tiny random
checkpoints of the three variants), with vllm-omni's messages; ``voice`` ignored with
a warning where the variant has no named voices; Hugging Face ids and checkpoint
folder names as ``model``; language names on a multilingual model."""

from __future__ import annotations

import io
import wave
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.serving import RunningServer, run_server
from tests.wsclient import Client
from voiceserver.config import ServerConfig, config_for_checkpoint, with_checkpoint

CV_NAME = "Qwen3-TTS-12Hz-1.7B-CustomVoice"
SHORT = {"max_new_tokens": 3, "temperature": 0}


def reference_wav(seconds: float = 1.5, rate: int = 16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    tone = 0.3 * np.sin(2 * np.pi * 180 * t) + 0.05 * np.random.default_rng(0).standard_normal(
        len(t)
    )
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((tone * 32767).astype("<i2").tobytes())
    return out.getvalue()


def serve(checkpoint: Path) -> Iterator[RunningServer]:
    config = with_checkpoint(config_for_checkpoint(checkpoint, {"max_frames": 40}), checkpoint)
    with run_server(config, ServerConfig()) as running:
        yield running


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("compat_tasks")


@pytest.fixture(scope="module")
def custom_voice(root: Path) -> Iterator[RunningServer]:
    ckpt = build_checkpoint(root / CV_NAME, BuildOptions(variant="custom_voice", size_name="1b7"))
    yield from serve(ckpt)


@pytest.fixture(scope="module")
def voice_design(root: Path) -> Iterator[RunningServer]:
    ckpt = build_checkpoint(root / "vd", BuildOptions(variant="voice_design", size_name="1b7"))
    yield from serve(ckpt)


@pytest.fixture(scope="module")
def base(root: Path) -> Iterator[RunningServer]:
    ckpt = build_checkpoint(root / "base", BuildOptions(variant="base", size_name="0b6"))
    yield from serve(ckpt)


def post(server: RunningServer, **body: object) -> httpx.Response:
    payload = {"input": "Hello there.", "response_format": "pcm", **SHORT, **body}
    return httpx.post(server.http + "/v1/audio/speech", json=payload, timeout=120)


def error(response: httpx.Response) -> dict:
    assert response.status_code == 400, response.text[:300]
    return response.json()["error"]


# -- task_type ------------------------------------------------------------------------------


def test_models_lists_each_variants_task(
    custom_voice: RunningServer, voice_design: RunningServer, base: RunningServer
) -> None:
    for server, task in (
        (custom_voice, "CustomVoice"),
        (voice_design, "VoiceDesign"),
        (base, "Base"),
    ):
        entry = httpx.get(server.http + "/v1/models").json()["data"][0]
        assert entry["task_types"] == [task]


@pytest.mark.parametrize("task", ["Base", "VoiceDesign"])
def test_a_task_the_variant_cannot_do_is_refused(custom_voice: RunningServer, task: str) -> None:
    err = error(post(custom_voice, task_type=task, instructions="calm", ref_audio="AAAA"))
    assert err["param"] == "task_type"
    assert task in err["message"] and "CustomVoice" in err["message"]


def test_custom_voice_task_on_its_variant(custom_voice: RunningServer) -> None:
    speaker = custom_voice.runtime.model.capabilities.voices[0].name
    assert post(custom_voice, task_type="CustomVoice", voice=speaker).status_code == 200
    err = error(post(custom_voice, task_type="CustomVoice", voice="nobody"))
    assert err["param"] == "voice" and speaker in err["message"]
    err = error(post(custom_voice, task_type="CustomVoice", ref_text="words"))
    assert err["param"] == "ref_text" and "only valid for Base task" in err["message"]


def test_voice_design_needs_instructions(voice_design: RunningServer) -> None:
    err = error(post(voice_design, task_type="VoiceDesign"))
    assert err["param"] == "instructions"
    assert "VoiceDesign task requires 'instructions'" in err["message"]
    err = error(post(voice_design, task_type="Base", ref_audio="AAAA"))
    assert err["param"] == "task_type"


def test_voice_with_voice_design_is_ignored_with_a_warning(voice_design: RunningServer) -> None:
    """vllm-omni's own example client sends a voice with every request."""
    with_voice = post(voice_design, task_type="VoiceDesign", instructions="warm", voice="vivian")
    assert with_voice.status_code == 200, with_voice.text
    assert "vivian" in with_voice.headers["warning"] and "ignored" in with_voice.headers["warning"]
    plain = post(voice_design, task_type="VoiceDesign", instructions="warm")
    assert "warning" not in plain.headers
    assert with_voice.content == plain.content


async def test_native_socket_says_the_ignored_voice_as_a_warning(
    voice_design: RunningServer,
) -> None:
    client = await Client.connect(voice_design.ws)
    for cid, voice in (("named", "vivian"), ("plain", None)):
        create = {"voice": voice} if voice else {}
        await client.send(
            type="context.create", context_id=cid, instructions="warm", seed=7, **SHORT, **create
        )
        await client.send(type="text.append", context_id=cid, text="Hello there.")
        await client.send(type="context.end", context_id=cid)
        await client.until("context.done", cid)
    warned = [w for w in client.got.of_type("warning") if "voice" in w["message"]]
    assert [w["context_id"] for w in warned] == ["named"], client.got.of_type("warning")
    assert "vivian" in warned[0]["message"] and "ignored" in warned[0]["message"]
    assert client.got.audio["named"] and client.got.audio["plain"]
    await client.close()


def test_base_needs_reference_audio(base: RunningServer) -> None:
    err = error(post(base, task_type="Base"))
    assert err["param"] == "ref_audio" and "Base task requires 'ref_audio'" in err["message"]
    err = error(post(base, task_type="CustomVoice"))
    assert err["param"] == "task_type" and "Base" in err["message"]


def test_base_clones_with_reference_audio(base: RunningServer) -> None:
    import base64

    ref = "data:audio/wav;base64," + base64.b64encode(reference_wav()).decode()
    response = post(base, task_type="Base", ref_audio=ref, x_vector_only_mode=True, voice="me")
    assert response.status_code == 200, response.text
    assert len(response.content) > 0 and "me" in response.headers["warning"]


# -- model names and languages ----------------------------------------------------------------


@pytest.mark.parametrize("model", [f"Qwen/{CV_NAME}", CV_NAME, "qwen3-tts-1.7b-customvoice"])
def test_hugging_face_id_and_folder_name_are_the_model(
    custom_voice: RunningServer, model: str
) -> None:
    client = openai.OpenAI(base_url=custom_voice.http + "/v1", api_key="x", max_retries=0)
    speaker = custom_voice.runtime.model.capabilities.voices[0].name
    response = client.audio.speech.create(
        model=model, voice=speaker, input="Hi.", response_format="pcm", extra_body=SHORT
    )
    assert len(response.content) > 0
    ids = [m.id for m in client.models.list()]
    assert CV_NAME in ids and "qwen3-tts-1.7b-customvoice" in ids


@pytest.mark.parametrize("language", ["English", "english", "en", "Chinese", "zh", "Auto"])
def test_language_forms_on_a_multilingual_model(custom_voice: RunningServer, language: str) -> None:
    speaker = custom_voice.runtime.model.capabilities.voices[0].name
    response = post(custom_voice, voice=speaker, language=language)
    assert response.status_code == 200, response.text


def test_unknown_language_lists_the_models_languages(custom_voice: RunningServer) -> None:
    err = error(post(custom_voice, language="Klingon"))
    assert err["param"] == "language" and "English (en)" in err["message"]
