"""Uploaded voices end to end: POST/GET/DELETE /v1/audio/voices on a tiny Base
checkpoint, used by name over the WebSocket and the HTTP shim, kept across a
restart."""

from __future__ import annotations

import base64
import io
import json
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from models.base import ClonedVoice
from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.serving import RunningServer, run_server
from tests.wsclient import Client
from voiceserver.config import (
    ModelConfig,
    ServerConfig,
    config_for_checkpoint,
    load_model_config,
    with_checkpoint,
)
from voiceserver.voices import VoiceRecord, VoiceStore

TEXT = "Hello there, how are you today?"
REF_TEXT = "The quick brown fox jumps over the lazy dog."
KEY = "voices-test-key"
AUTH = {"authorization": f"Bearer {KEY}"}


def wav_bytes(seconds: float, rate: int = 24000, seed: int = 0) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(seed).standard_normal(t.size)
    signal = 0.3 * np.sin(2 * np.pi * 180 * t) + 0.2 * np.sin(2 * np.pi * 310 * t) + 0.05 * noise
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(signal, -1, 1) * 32767).astype("<i2").tobytes())
    return out.getvalue()


REF_WAV = wav_bytes(1.6)
REF_B64 = base64.b64encode(REF_WAV).decode()


@pytest.fixture(scope="module")
def base_config(tmp_path_factory: pytest.TempPathFactory) -> ModelConfig:
    root = tmp_path_factory.mktemp("voices_ckpt")
    ckpt = build_checkpoint(root / "base", BuildOptions(variant="base", size_name="0b6", seed=7))
    config = with_checkpoint(config_for_checkpoint(ckpt, {"max_frames": 24}), ckpt)
    assert config.name == "qwen3-tts-0.6b-base"
    return config


def upload(
    http: httpx.Client, name: str, audio: bytes | None = REF_WAV, **form: str
) -> httpx.Response:
    files = {"audio_sample": ("ref.wav", audio, "audio/wav")} if audio is not None else None
    data = {"name": name, **form}
    if files is None:  # force multipart even without a file part
        files = {"unused": (None, "")}
    return http.post("/v1/audio/voices", data=data, files=files)


async def ws_audio(server: RunningServer, cid: str, **create: Any) -> bytes:
    client = await Client.connect(server.ws)
    await client.send(type="context.create", context_id=cid, temperature=0, **create)
    await client.send(type="text.append", context_id=cid, text=TEXT)
    await client.send(type="context.end", context_id=cid)
    done = await client.until("context.done", cid, timeout=120)
    await client.close()
    assert done["usage"]["frames"] > 0
    return bytes(client.got.audio[cid])


async def ws_error(server: RunningServer, **create: Any) -> dict[str, Any]:
    client = await Client.connect(server.ws)
    await client.send(type="context.create", context_id="e", **create)
    error = await client.until("error", timeout=30)
    await client.close()
    return error


def speak(http: httpx.Client, **body: Any) -> httpx.Response:
    return http.post(
        "/v1/audio/speech",
        json={"input": TEXT, "response_format": "pcm", "temperature": 0, **body},
    )


def http_client(server: RunningServer, headers: dict[str, str] | None = None) -> httpx.Client:
    return httpx.Client(base_url=server.http, timeout=120, headers=headers)


# -- the whole life of a voice ---------------------------------------------------------


async def test_uploaded_voice_is_used_everywhere_and_survives_a_restart(
    base_config: ModelConfig, tmp_path: Path
) -> None:
    server_config = ServerConfig(voices_dir=tmp_path)
    with run_server(base_config, server_config) as server, http_client(server) as http:
        created = upload(http, "Narrator", ref_text=REF_TEXT, consent="consent-1")
        assert created.status_code == 200, created.text
        body = created.json()
        assert body["success"] is True and body["object"] == "audio.voice"
        assert body["id"] == body["name"] == body["voice"]["name"] == "Narrator"
        assert body["voice"]["x_vector_only"] is False
        # No ref_text: the voice clones from the speaker embedding alone (as in vllm-omni).
        plain = http.post("/v1/audio/voices", json={"name": "plain", "audio_sample": REF_B64})
        assert plain.status_code == 200, plain.text
        assert plain.json()["voice"]["x_vector_only"] is True

        listing = http.get("/v1/audio/voices").json()
        assert listing["voices"] == ["Narrator", "clone", "plain"]
        entry = listing["uploaded_voices"][0]
        assert entry["name"] == "Narrator" and "ref_text" not in entry  # a summary
        assert http.get("/v1/audio/voices/Narrator").json()["ref_text"] == REF_TEXT
        assert entry["consent"] == "consent-1" and entry["file_size"] == len(REF_WAV)
        assert entry["mime_type"] == "audio/wav" and "error" not in entry
        assert [d["name"] for d in listing["data"] if d["uploaded"]] == ["Narrator", "plain"]
        folder = tmp_path / "qwen3-tts-0.6b-base" / "Narrator"
        assert json.loads((folder / "voice.json").read_text())["record"]["name"] == "Narrator"
        assert (folder / "arrays.npz").is_file()

        # Named voice == the same reference given inline, over the WebSocket ...
        named = await ws_audio(server, "named", voice="Narrator")
        inline = await ws_audio(server, "inline", ref_audio=REF_B64, ref_text=REF_TEXT)
        assert len(named) > 0 and named == inline
        # ... and over the HTTP shim (names match in any case, like built-in ones).
        by_name = speak(http, voice="narrator")
        assert by_name.status_code == 200, by_name.text
        by_ref = speak(http, ref_audio=f"data:audio/wav;base64,{REF_B64}", ref_text=REF_TEXT)
        assert len(by_name.content) > 0 and by_name.content == by_ref.content
        plain_named = speak(http, voice="plain")
        plain_inline = speak(http, ref_audio=REF_B64, x_vector_only_mode=True)
        assert plain_named.status_code == 200, plain_named.text
        assert plain_named.content == plain_inline.content != by_name.content

    with run_server(base_config, server_config) as server, http_client(server) as http:
        listing = http.get("/v1/audio/voices").json()
        assert [v["name"] for v in listing["uploaded_voices"]] == ["Narrator", "plain"]
        again = speak(http, voice="Narrator")
        assert again.status_code == 200 and again.content == by_name.content
        assert await ws_audio(server, "after", voice="Narrator") == named

        deleted = http.delete("/v1/audio/voices/narrator")
        assert deleted.status_code == 200, deleted.text
        assert deleted.json()["deleted"] is True and deleted.json()["id"] == "Narrator"
        assert not folder.exists()
        assert http.get("/v1/audio/voices").json()["voices"] == ["clone", "plain"]
        gone = speak(http, voice="Narrator")
        assert gone.status_code == 400
        error = gone.json()["error"]
        assert (error["code"], error["param"]) == ("unknown_voice", "voice")
        assert "'Narrator'" in error["message"] and "plain" in error["message"]
        error = await ws_error(server, voice="Narrator")
        assert (error["code"], error["param"]) == ("unknown_voice", "voice")
        again = http.delete("/v1/audio/voices/Narrator")
        assert again.status_code == 404 and again.json()["error"]["code"] == "unknown_voice"


async def test_a_damaged_voice_is_listed_and_named_in_errors(
    base_config: ModelConfig, tmp_path: Path
) -> None:
    store = VoiceStore(base_config.name, ["clone"], tmp_path)
    arrays = {"speaker_embedding": np.zeros(4, np.float32)}
    for name in ("broken", "mismatched"):
        store.add(VoiceRecord(name, created_at=1), ClonedVoice(arrays, {}))
    (tmp_path / base_config.name / "broken" / "arrays.npz").write_bytes(b"not a zip file")
    with run_server(base_config, ServerConfig(voices_dir=tmp_path)) as server:
        with http_client(server) as http:
            listing = http.get("/v1/audio/voices").json()
            entries = {v["name"]: v for v in listing["uploaded_voices"]}
            assert "arrays.npz is not an .npz" in entries["broken"]["error"]
            assert "error" not in entries["mismatched"]
            broken = speak(http, voice="broken")
            assert broken.status_code == 500
            error = broken.json()["error"]
            assert error["param"] == "voice" and "'broken'" in error["message"]
            # Written by a checkpoint of another size: refused, naming the voice.
            mismatched = speak(http, voice="mismatched")
            assert mismatched.status_code == 400
            error = mismatched.json()["error"]
            assert error["param"] == "voice" and "'mismatched'" in error["message"]
            assert "64 finite floats" in error["message"]
            assert http.delete("/v1/audio/voices/broken").status_code == 200
            names = [v["name"] for v in http.get("/v1/audio/voices").json()["uploaded_voices"]]
            assert names == ["mismatched"]
        error = await ws_error(server, voice="mismatched")
        assert error["param"] == "voice" and "'mismatched'" in error["message"]


# -- bad uploads --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def guarded(
    base_config: ModelConfig, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[httpx.Client]:
    config = ServerConfig(api_keys=(KEY,), voices_dir=tmp_path_factory.mktemp("guarded_voices"))
    with run_server(base_config, config) as server, http_client(server, AUTH) as http:
        yield http


def assert_error(response: httpx.Response, status: int, param: str | None, *words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param, error
    for word in words:
        assert word in error["message"], error


@pytest.mark.parametrize(
    ("name", "audio", "form", "param", "words"),
    [
        ("nofile", None, {}, "audio_sample", ["required"]),
        ("empty", b"", {}, "audio_sample", ["empty"]),
        ("noise", b"this is not audio at all", {}, "audio_sample", ["not decodable audio"]),
        ("short", wav_bytes(0.3), {}, "audio_sample", ["too short"]),
        ("toolong", REF_WAV, {"ref_text": "x" * 10_001}, "ref_text", ["10000"]),
        ("icl", REF_WAV, {"x_vector_only": "false"}, "ref_text", ["required"]),
        ("flag", REF_WAV, {"x_vector_only": "maybe"}, "x_vector_only", ["true or false"]),
        ("../etc", REF_WAV, {}, "name", ["A-Z a-z 0-9 _ . -"]),
        ("two words", REF_WAV, {}, "name", ["not allowed"]),
        (".hidden", REF_WAV, {}, "name", ["not starting with '.'"]),
        ("x" * 65, REF_WAV, {}, "name", ["1 to 64"]),
        ("", REF_WAV, {}, "name", ["required"]),
    ],
)
def test_bad_uploads_name_the_field(
    guarded: httpx.Client,
    name: str,
    audio: bytes | None,
    form: dict[str, str],
    param: str,
    words: list[str],
) -> None:
    assert_error(upload(guarded, name, audio, **form), 400, param, *words)
    assert guarded.get("/v1/audio/voices").json()["uploaded_voices"] == []


def test_names_are_unique_in_any_case_and_builtins_are_taken(guarded: httpx.Client) -> None:
    assert upload(guarded, "dup").status_code == 200
    assert_error(upload(guarded, "dup"), 409, "name", "already exists")
    assert_error(upload(guarded, "DUP"), 409, "name", "'dup' already exists")
    assert_error(upload(guarded, "Clone"), 409, "name", "built-in")
    assert_error(guarded.delete("/v1/audio/voices/clone"), 400, "name", "built-in")
    assert guarded.delete("/v1/audio/voices/dup").status_code == 200
    assert_error(guarded.delete("/v1/audio/voices/dup"), 404, "name", "'dup'")


def test_json_uploads_and_other_bodies(guarded: httpx.Client) -> None:
    bad = guarded.post("/v1/audio/voices", json={"name": "j", "audio_sample": "%%%"})
    assert_error(bad, 400, "audio_sample", "base64")
    bad = guarded.post("/v1/audio/voices", json={"name": "j", "audio_sample": 5})
    assert_error(bad, 400, "audio_sample", "string")
    bad = guarded.post("/v1/audio/voices", json={"name": "j", "ref_audio": REF_B64, "consent": 1})
    assert_error(bad, 400, "consent", "string")
    bad = guarded.post("/v1/audio/voices", content=b"hi", headers={"content-type": "text/plain"})
    assert_error(bad, 400, None, "multipart/form-data")
    ok = guarded.post(
        "/v1/audio/voices",
        json={"name": "j", "ref_audio": f"data:audio/wav;base64,{REF_B64}", "ref_text": REF_TEXT},
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["voice"]["mime_type"] == "audio/wav"
    assert guarded.delete("/v1/audio/voices/j").status_code == 200


def test_voices_need_the_key(guarded: httpx.Client) -> None:
    stranger = httpx.Client(base_url=str(guarded.base_url), timeout=30)
    with stranger:
        for response in (
            stranger.post("/v1/audio/voices", data={"name": "k"}),
            stranger.delete("/v1/audio/voices/k"),
            stranger.get("/v1/audio/voices"),
        ):
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "unauthorized"


def test_a_model_that_cannot_clone_refuses_uploads(tmp_path: Path) -> None:
    config = ServerConfig(voices_dir=tmp_path)
    with run_server(load_model_config("tiny"), config) as server, http_client(server) as http:
        assert_error(upload(http, "mine"), 400, "audio_sample", "cannot clone voices")
        listing = http.get("/v1/audio/voices").json()
        assert listing["uploaded_voices"] == [] and listing["voices"] == ["tiny-a", "tiny-b"]
        assert_error(speak(http, voice="mine"), 400, "voice", "unknown voice", "tiny-a")
    assert [p.name for p in (tmp_path / "tiny").iterdir()] == []
