"""``ref_audio`` as a local path, a ``file://`` URI or a URL (what vllm-omni's clients
send): refused unless the operator allows it, confined to the allowed folder
(symlinks resolved first), URLs fetched from a real loopback HTTP server only when
non-public addresses are explicitly allowed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.e2e.dripserver import file_server
from tests.e2e.test_compat_http_tasks import SHORT, reference_wav
from tests.serving import RunningServer, run_server
from voiceserver.config import MediaConfig, ServerConfig, config_for_checkpoint, with_checkpoint


@dataclass
class Files:
    allowed: Path
    inside: Path
    outside: Path
    link: Path
    """A symlink inside the allowed folder to the file outside it."""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    root = tmp_path_factory.mktemp("media")
    allowed = root / "allowed"
    allowed.mkdir()
    inside, outside = allowed / "ref.wav", root / "secret.wav"
    inside.write_bytes(reference_wav())
    outside.write_bytes(reference_wav())
    link = allowed / "escape.wav"
    link.symlink_to(outside)
    return Files(allowed, inside, outside, link)


@pytest.fixture(scope="module")
def audio_url() -> Iterator[str]:
    """A real HTTP server on loopback serving the reference WAV."""
    with file_server(reference_wav()) as served:
        yield served.url("")


def serve(base_checkpoint: Path, media: MediaConfig) -> Iterator[RunningServer]:
    config = with_checkpoint(
        config_for_checkpoint(base_checkpoint, {"max_frames": 40}), base_checkpoint
    )
    with run_server(config, ServerConfig(media=media)) as running:
        yield running


@pytest.fixture(scope="module")
def closed(base_checkpoint: Path) -> Iterator[RunningServer]:
    yield from serve(base_checkpoint, MediaConfig())


@pytest.fixture(scope="module")
def opened(base_checkpoint: Path, files: Files) -> Iterator[RunningServer]:
    """Local files from the allowed folder, URLs from public addresses only."""
    yield from serve(
        base_checkpoint, MediaConfig(allowed_local_media_path=files.allowed, allow_url_fetch=True)
    )


@pytest.fixture(scope="module")
def private(base_checkpoint: Path) -> Iterator[RunningServer]:
    yield from serve(base_checkpoint, MediaConfig(allow_url_fetch=True, allow_private_urls=True))


def clone(server: RunningServer, ref_audio: str) -> httpx.Response:
    body = {
        "input": "Hello there.",
        "task_type": "Base",
        "ref_audio": ref_audio,
        "x_vector_only_mode": True,
        "response_format": "pcm",
        **SHORT,
    }
    return httpx.post(server.http + "/v1/audio/speech", json=body, timeout=120)


def refused(response: httpx.Response) -> str:
    assert response.status_code == 400, response.text[:200]
    error = response.json()["error"]
    assert error["param"] == "ref_audio"
    return error["message"]


def test_paths_and_urls_are_refused_by_default(
    closed: RunningServer, files: Files, audio_url: str
) -> None:
    assert "--allowed-local-media-path" in refused(clone(closed, str(files.inside)))
    assert "--allowed-local-media-path" in refused(clone(closed, files.inside.as_uri()))
    assert "--allow-url-fetch" in refused(clone(closed, audio_url + "/ref.wav"))


def test_a_file_in_the_allowed_folder_is_read(opened: RunningServer, files: Files) -> None:
    by_path = clone(opened, str(files.inside))
    assert by_path.status_code == 200, by_path.text
    by_uri = clone(opened, files.inside.as_uri())
    assert by_uri.status_code == 200 and by_uri.content == by_path.content


def test_files_outside_the_folder_are_refused(opened: RunningServer, files: Files) -> None:
    assert "outside" in refused(clone(opened, str(files.outside)))
    assert "outside" in refused(clone(opened, str(files.allowed / ".." / files.outside.name)))
    # The link lies inside the folder, the file it points to does not.
    assert "outside" in refused(clone(opened, str(files.link)))
    assert "no such file" in refused(clone(opened, str(files.allowed / "missing.wav")))


def test_loopback_urls_are_refused_without_the_private_flag(
    opened: RunningServer, audio_url: str
) -> None:
    message = refused(clone(opened, audio_url + "/ref.wav"))
    assert "127.0.0.1" in message and "--allow-private-url-fetch" in message
    localhost = audio_url.replace("127.0.0.1", "localhost")
    assert "non-public" in refused(clone(opened, localhost + "/ref.wav"))


def test_urls_are_fetched_when_allowed(
    private: RunningServer, opened: RunningServer, files: Files, audio_url: str
) -> None:
    fetched = clone(private, audio_url + "/ref.wav")
    assert fetched.status_code == 200, fetched.text
    assert clone(private, audio_url + "/redirect").content == fetched.content
    # The same audio read from a file clones the same voice.
    assert clone(opened, str(files.inside)).content == fetched.content
    assert "404" in refused(clone(private, audio_url + "/nothing"))
    assert "URL" in refused(clone(private, "ftp://127.0.0.1/ref.wav"))


def test_the_cli_flags_reach_the_server(
    base_checkpoint: Path, files: Files, tmp_path: Path
) -> None:
    """``voiceserver serve --served-model-name ... --allowed-local-media-path ...``."""
    import os
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).parent / "voiceserver"
    args = [str(exe), "serve", "--model", str(base_checkpoint), "--port", str(port)]
    args += ["--served-model-name", "acme/cloner", "--served-model-name", "cloner"]
    args += ["--allowed-local-media-path", str(files.allowed), "--option", "max_frames=40"]
    args += ["--voices-dir", str(tmp_path / "voices"), "--log-level", "warning"]
    proc = subprocess.Popen(
        args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                models = httpx.get(base + "/v1/models", timeout=2).json()
                break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.monotonic() < deadline
                time.sleep(0.3)
        assert [m["id"] for m in models["data"]][:2] == ["acme/cloner", "cloner"]
        body = {
            "model": "acme/cloner",
            "input": "Hello there.",
            "ref_audio": files.inside.as_uri(),
            "x_vector_only_mode": True,
            "response_format": "pcm",
            **SHORT,
        }
        response = httpx.post(base + "/v1/audio/speech", json=body, timeout=120)
        assert response.status_code == 200, response.text
        body["ref_audio"] = str(files.link)
        assert httpx.post(base + "/v1/audio/speech", json=body, timeout=120).status_code == 400
    finally:
        proc.terminate()
        proc.wait(30)
