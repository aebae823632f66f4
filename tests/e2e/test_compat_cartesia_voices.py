"""An uploaded (cloned) voice answers Cartesia's clients by its derived UUID and its name:
listed by ``GET /voices`` as the caller's own, and spoken over ``/tts/websocket`` and
``/tts/bytes`` (tiny random Qwen3-TTS Base checkpoint, which clones)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets

from protocol.compat_cartesia import voice_uuid
from tests.e2e.test_voices import REF_WAV
from tests.serving import RunningServer, run_server
from voiceserver.config import ServerConfig, config_for_checkpoint, with_checkpoint

RAW = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}


@pytest.fixture(scope="module")
def clone_server(base_checkpoint: Path) -> Iterator[RunningServer]:
    config = with_checkpoint(
        config_for_checkpoint(base_checkpoint, {"max_frames": 16}), base_checkpoint
    )
    with run_server(config, ServerConfig()) as server:
        yield server


async def test_an_uploaded_voice_is_listed_and_spoken_by_its_uuid(
    clone_server: RunningServer,
) -> None:
    clone_id = voice_uuid("Narrator")
    with httpx.Client(base_url=clone_server.http, timeout=120) as http:
        files = {"audio_sample": ("ref.wav", REF_WAV, "audio/wav")}
        uploaded = http.post("/v1/audio/voices", data={"name": "Narrator"}, files=files)
        assert uploaded.status_code == 200, uploaded.text
        listing = http.get("/voices", params={"is_owner": "true"}).json()["data"]
        assert [(v["id"], v["name"], v["is_owner"]) for v in listing] == [
            (clone_id, "Narrator", True)
        ]
        assert http.get(f"/voices/{clone_id}").json()["name"] == "Narrator"
        body = {"model_id": "sonic-3", "transcript": "Hi.", "output_format": RAW}
        spoken = http.post("/tts/bytes", json={**body, "voice": {"mode": "id", "id": clone_id}})
        assert spoken.status_code == 200 and len(spoken.content) > 0
        by_name = http.post("/tts/bytes", json={**body, "voice": "narrator"})
        assert by_name.status_code == 200 and len(by_name.content) > 0
    url = f"ws://{clone_server.host}:{clone_server.port}/tts/websocket"
    async with websockets.connect(url) as ws:
        request = {
            "context_id": "c",
            "model_id": "sonic-2",
            "transcript": "Hello.",
            "voice": {"mode": "id", "id": clone_id},
            "output_format": RAW,
        }
        await ws.send(json.dumps(request))
        audio = b""
        while (msg := json.loads(await ws.recv()))["type"] != "done":
            assert msg["type"] == "chunk", msg
            audio += base64.b64decode(msg["data"])
    assert len(audio) > 0
    # Deleted, it is unknown again, to the socket's clients too.
    with httpx.Client(base_url=clone_server.http) as http:
        assert http.delete("/v1/audio/voices/Narrator").status_code == 200
        gone = http.post("/tts/bytes", json={**body, "voice": {"mode": "id", "id": clone_id}})
        assert gone.status_code == 400 and gone.json()["error_code"] == "unknown_voice"
