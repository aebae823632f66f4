"""Untrusted reference audio over a real server: an FFmpeg playlist sent as "audio"
(a voice upload, a WebSocket ``context.create``, an HTTP speech request) naming a
real WAV in the server's working directory is refused with the one generic text,
the same as for a missing file, and the file is never opened (its access time, set a
day before its modification time, does not move)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from tests.e2e.test_voices import REF_TEXT, http_client, speak, upload, wav_bytes, ws_error
from tests.e2e.test_voices import base_config as base_config  # the module's checkpoint fixture
from tests.serving import run_server
from voiceserver.config import ModelConfig, ServerConfig

FORMATS = "WAV, FLAC, MP3, Ogg (Opus/Vorbis), WebM or M4A/AAC"
GENERIC = f"ref_audio: not decodable audio; send {FORMATS}"
UPLOAD_GENERIC = f"audio_sample: not decodable audio; send {FORMATS}"
DAY_NS = 86_400 * 10**9


def concat(name: str) -> bytes:
    return f"ffconcat version 1.0\nfile '{name}'\n".encode()


def arm(path: Path) -> int:
    """Access time a day before the modification time, so that any read moves it."""
    st = path.stat()
    os.utime(path, ns=(st.st_mtime_ns - DAY_NS, st.st_mtime_ns))
    return path.stat().st_atime_ns


@pytest.fixture
def secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A WAV that would make a good voice, in the server's working directory."""
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    path = workdir / "secret.wav"
    path.write_bytes(wav_bytes(1.6, seed=3))
    monkeypatch.chdir(workdir)
    return path


async def test_playlists_are_refused_alike_and_never_followed(
    base_config: ModelConfig, secret: Path, tmp_path: Path
) -> None:
    armed = arm(secret)
    probe = secret.read_bytes()  # the witness works: a read moves the access time
    assert secret.stat().st_atime_ns != armed
    server_config = ServerConfig(voices_dir=tmp_path / "voices")
    with run_server(base_config, server_config) as server, http_client(server) as http:
        armed = arm(secret)
        for name in ("secret.wav", "missing.wav", "./secret.wav"):
            playlist = concat(name)
            inline = base64.b64encode(playlist).decode()

            uploaded = upload(http, "stolen", playlist, ref_text=REF_TEXT)
            assert uploaded.status_code == 400, uploaded.text
            error = uploaded.json()["error"]
            assert (error["param"], error["code"]) == ("audio_sample", "invalid_field")
            assert error["message"] == UPLOAD_GENERIC

            error = await ws_error(server, ref_audio=inline, ref_text=REF_TEXT)
            assert (error["param"], error["code"]) == ("ref_audio", "invalid_field")
            assert error["message"] == GENERIC

            spoken = speak(http, ref_audio=f"data:audio/wav;base64,{inline}", ref_text=REF_TEXT)
            assert spoken.status_code == 400, spoken.text
            assert spoken.json()["error"]["message"] == GENERIC
        assert secret.stat().st_atime_ns == armed
        assert http.get("/v1/audio/voices").json()["uploaded_voices"] == []

        # The file itself is a good voice: had a playlist been followed, its upload
        # would have succeeded with this very audio.
        direct = upload(http, "direct", probe, ref_text=REF_TEXT)
        assert direct.status_code == 200, direct.text
