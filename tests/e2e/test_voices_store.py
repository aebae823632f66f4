"""The voices store under a flood of uploads (tiny random Qwen3-TTS Base checkpoint).

Before: an upload's ``ref_text`` could hold ``max_text_chars`` (100,000) characters
while inline ``ref_text`` was capped at 10,000 elsewhere (and not at all on the vllm
socket); 1,000 such uploads took 608 MB of disk and ``GET /v1/audio/voices`` answered
with all of them, every ``ref_text`` included (303 MB of JSON; three listings at once
+983 MB, ``/health`` stalled 1.9 s). Now ``ref_text`` has one cap everywhere
(``protocol.messages.REF_TEXT_MAX_LEN``), the store has a total size
(``Limits.max_voice_store_bytes``: a full store refuses uploads with 413 saying how
to free space), and the listing is paginated (``limit``/``after``, ``has_more``,
``last_id``) with summary entries; ``GET /v1/audio/voices/{name}`` has the details.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from protocol.messages import REF_TEXT_MAX_LEN
from tests.e2e.test_voices import REF_B64, REF_WAV
from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.serving import RunningServer, run_server
from voiceserver.config import (
    Limits,
    ModelConfig,
    ServerConfig,
    config_for_checkpoint,
    with_checkpoint,
)

STORE_CAP = 400_000
LONG_TEXT = "The quick brown fox jumps over the lazy dog. " * (REF_TEXT_MAX_LEN // 45)
SHORT = {"max_new_tokens": 3, "temperature": 0}


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> ModelConfig:
    root = tmp_path_factory.mktemp("store_ckpt")
    ckpt = build_checkpoint(root / "base", BuildOptions(variant="base", size_name="0b6", seed=7))
    return with_checkpoint(config_for_checkpoint(ckpt, {"max_frames": 24}), ckpt)


@pytest.fixture(scope="module")
def server(
    config: ModelConfig, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    limits = Limits(max_voice_store_bytes=STORE_CAP)
    voices = tmp_path_factory.mktemp("voices")
    with run_server(config, ServerConfig(voices_dir=voices, limits=limits)) as running:
        yield running


def upload(http: httpx.Client, name: str, **form: str) -> httpx.Response:
    files = {"audio_sample": ("ref.wav", REF_WAV, "audio/wav")}
    return http.post("/v1/audio/voices", data={"name": name, **form}, files=files)


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text[:300]
    return response.json()["error"]


def test_ref_text_has_one_cap_on_every_endpoint(server: RunningServer) -> None:
    over = "x" * (REF_TEXT_MAX_LEN + 1)
    with httpx.Client(base_url=server.http, timeout=60) as http:
        error = error_of(upload(http, "long", ref_text="x" * 100_000), 400)
        assert error["param"] == "ref_text" and str(REF_TEXT_MAX_LEN) in error["message"]
        error = error_of(upload(http, "long", ref_text=over), 400)
        assert error["param"] == "ref_text"
        assert upload(http, "atcap", ref_text="x" * REF_TEXT_MAX_LEN).status_code == 200
        speech = {"input": "Hello.", "ref_audio": REF_B64, "ref_text": over, **SHORT}
        error = error_of(http.post("/v1/audio/speech", json=speech), 400)
        assert error["param"] == "ref_text"
        hidden = {**speech, "ref_text": None, "extra_params": {"ref_text": over}}
        error = error_of(http.post("/v1/audio/speech", json=hidden), 400)
        assert error["param"] == "ref_text"
        batch = {"ref_audio": REF_B64, **SHORT, "items": [{"input": "Hi.", "ref_text": over}]}
        reply = http.post("/v1/audio/speech/batch", json=batch)
        assert reply.status_code == 200
        result = reply.json()["results"][0]
        assert result["status"] == "error" and result["param"] == "ref_text"

    async def sockets() -> None:
        async with websockets.connect(server.ws) as ws:
            json.loads(await ws.recv())
            create = {"type": "context.create", "context_id": "c", "ref_audio": REF_B64}
            await ws.send(json.dumps({**create, "ref_text": over}))
            error = json.loads(await ws.recv())
            assert error["type"] == "error" and error["param"] == "ref_text", error
        url = server.ws.replace("/v1/audio/speech/ws", "/v1/audio/speech/stream")
        async with websockets.connect(url) as ws:
            await ws.send(
                json.dumps({"type": "session.config", "ref_audio": REF_B64, "ref_text": over})
            )
            error = json.loads(await asyncio.wait_for(ws.recv(), 30))
            assert error["type"] == "error" and "ref_text" in error["message"], error

    asyncio.run(sockets())


def test_a_full_store_refuses_uploads_and_the_listing_stays_small(server: RunningServer) -> None:
    directory = server.runtime.voices.directory
    with httpx.Client(base_url=server.http, timeout=60) as http:
        stored = 0
        for i in range(500):
            reply = upload(http, f"v{i:03d}", ref_text=LONG_TEXT)
            if reply.status_code != 200:
                break
            stored += 1
        else:
            pytest.fail("500 uploads of 10,000-character ref_text all stored")
        error = error_of(reply, 413)
        assert "max_voice_store_bytes" in error["message"] and "DELETE" in error["message"]
        assert stored > 5
        assert folder_bytes(directory) < STORE_CAP * 1.5

        # A deletion frees room for the next upload.
        assert http.delete("/v1/audio/voices/v000").status_code == 200
        assert upload(http, "again", ref_text=LONG_TEXT).status_code == 200

        # Summaries, a page at a time: the long fields only in a voice's own entry.
        started = time.monotonic()
        with ThreadPoolExecutor(3) as pool:
            pages = list(pool.map(lambda _: http.get("/v1/audio/voices"), range(3)))
        for page in pages:
            assert page.status_code == 200
            assert len(page.content) < 64 * 1024, len(page.content)
        listing = pages[0].json()
        assert all("ref_text" not in entry for entry in listing["uploaded_voices"])
        assert time.monotonic() - started < 5
        names: list[str] = []
        after = None
        while True:
            params = {"limit": 7, **({"after": after} if after else {})}
            page = http.get("/v1/audio/voices", params=params).json()
            assert len(page["data"]) <= 7
            assert page["object"] == "list"
            names += [entry["name"] for entry in page["data"]]
            if not page["has_more"]:
                break
            after = page["last_id"]
            assert after == names[-1]
        uploaded = [n for n in names if n.startswith("v") or n == "again" or n == "atcap"]
        assert len(uploaded) == len(set(uploaded)) == stored + 1  # v000 went, "again" came
        detail = http.get("/v1/audio/voices/v001").json()
        assert detail["name"] == "v001" and detail["ref_text"] == LONG_TEXT
        error = error_of(http.get("/v1/audio/voices/nobody"), 404)
        assert error["param"] == "name"
        error = error_of(http.get("/v1/audio/voices", params={"limit": 0}), 400)
        assert error["param"] == "limit"


def test_the_cap_counts_voices_kept_across_a_restart(config: ModelConfig, tmp_path: Path) -> None:
    small = Limits(max_voice_store_bytes=STORE_CAP // 4)
    server_config = ServerConfig(voices_dir=tmp_path, limits=small)
    with (
        run_server(config, server_config) as running,
        httpx.Client(base_url=running.http, timeout=60) as http,
    ):
        count = 0
        while upload(http, f"r{count}", ref_text=LONG_TEXT).status_code == 200:
            count += 1
            assert count < 200
    with (
        run_server(config, server_config) as running,
        httpx.Client(base_url=running.http, timeout=60) as http,
    ):
        error_of(upload(http, "more", ref_text=LONG_TEXT), 413)
