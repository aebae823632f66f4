"""``ref_audio`` URLs whose servers drip their headers, against ``voiceserver serve
--allow-url-fetch --allow-private-url-fetch`` in its own process.

Before: the fetch bounded each socket read, not the fetch, and ran in the loop's
default thread pool (six threads on this two-core box). Six URLs that send a header
byte every 2 s took all six threads for good: a bystander's URL fetch and voice upload
waited behind them (142 s and more), a client that left did not stop its fetch, and
SIGTERM hung until SIGKILL. Now a fetch has one deadline for connect, headers and body
(``MediaConfig.fetch_timeout_s``), runs on the event loop (cancelled, its socket
closed, when its request goes away), and a client has at most
``Limits.max_client_media_jobs`` fetches and decodes running (more: 429 naming
``ref_audio``).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from bench.spawn import SpawnedServer, spawn_server
from tests.e2e.dripserver import drip_server, file_server
from tests.e2e.test_voices import REF_WAV
from voiceserver.config import Limits, MediaConfig

ATTACKER, BYSTANDER = "attacker-key", "bystander-key"
DRIPS = 6
FETCH_TIMEOUT_S = MediaConfig().fetch_timeout_s
PROMPT_S = 8.0
"""A bystander's fetch or upload, and a cancelled fetch's close, take less than this
(before: they waited for the drips, minutes)."""
SHORT = {"max_new_tokens": 3, "temperature": 0}


def spawn(base_checkpoint: Path, voices: Path) -> Any:
    args = ("--voices-dir", str(voices), "--allow-url-fetch", "--allow-private-url-fetch")
    args += ("--api-key", ATTACKER, "--api-key", BYSTANDER, "--shutdown-timeout", "2")
    return spawn_server(None, model=base_checkpoint, options=("max_frames=24",), args=args)


@pytest.fixture(scope="module")
def server(
    base_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SpawnedServer]:
    with spawn(base_checkpoint, tmp_path_factory.mktemp("voices")) as running:
        yield running


def speak(server: SpawnedServer, url: str, key: str, timeout: float = 40) -> tuple[int, Any, float]:
    """POST /v1/audio/speech cloning from ``url``: (status, body, seconds)."""
    body = {"input": "Hello.", "ref_audio": url, "x_vector_only_mode": True, **SHORT}
    started = time.monotonic()
    response = httpx.post(
        server.http + "/v1/audio/speech",
        json={**body, "response_format": "pcm"},
        headers={"authorization": f"Bearer {key}"},
        timeout=timeout,
    )
    seconds = time.monotonic() - started
    parsed = response.json() if response.status_code != 200 else response.content
    return response.status_code, parsed, seconds


def upload(server: SpawnedServer, name: str, key: str) -> tuple[int, float]:
    started = time.monotonic()
    response = httpx.post(
        server.http + "/v1/audio/voices",
        data={"name": name},
        files={"audio_sample": ("ref.wav", REF_WAV, "audio/wav")},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    return response.status_code, time.monotonic() - started


def wait_for(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def timed_out(result: tuple[int, Any, float]) -> None:
    status, body, seconds = result
    assert status == 400, (status, body)
    assert body["error"]["param"] == "ref_audio"
    assert f"{FETCH_TIMEOUT_S:g} s" in body["error"]["message"]
    assert seconds < FETCH_TIMEOUT_S + 5, seconds


def test_dripping_urls_starve_nobody_and_end_at_the_deadline(server: SpawnedServer) -> None:
    with drip_server() as drip, file_server(REF_WAV) as files, ThreadPoolExecutor(DRIPS) as pool:
        drips = [pool.submit(speak, server, drip.url, ATTACKER) for _ in range(DRIPS)]
        assert wait_for(lambda: len(drip.opened) >= DRIPS, 10)
        status, _, fetch_s = speak(server, files.url(), BYSTANDER, timeout=30)
        assert status == 200 and fetch_s < PROMPT_S, (status, fetch_s)
        status, upload_s = upload(server, "bystander", BYSTANDER)
        assert status == 200 and upload_s < PROMPT_S, (status, upload_s)
        assert drip.open_now == DRIPS  # the drips were still in flight all along
        for future in drips:
            timed_out(future.result())
        ends = [round(future.result()[2], 1) for future in drips]
        print(
            f"bystander fetch {fetch_s:.2f} s, upload {upload_s:.2f} s; drips ended after {ends} s"
        )
        # Every dripping connection was closed by the server at the deadline.
        assert wait_for(lambda: drip.open_now == 0, 3), drip.open_now


def test_a_client_over_its_fetch_bound_gets_429(server: SpawnedServer) -> None:
    cap = Limits().max_client_media_jobs
    with drip_server() as drip, file_server(REF_WAV) as files, ThreadPoolExecutor(cap + 2) as pool:
        drips = [pool.submit(speak, server, drip.url, ATTACKER) for _ in range(cap + 2)]
        assert wait_for(lambda: len(drip.opened) >= cap, 10)
        status, _, _ = speak(server, files.url(), BYSTANDER, timeout=30)
        assert status == 200  # another client's bound is its own
        results = [future.result() for future in drips]
    refused = [r for r in results if r[0] == 429]
    assert len(refused) == 2, [r[:1] for r in results]
    for _, body, seconds in refused:
        error = body["error"]
        assert (error["code"], error["param"]) == ("rate_limited", "ref_audio")
        assert "max_client_media_jobs" in error["message"]
        assert seconds < 3
    for result in results:
        if result[0] != 429:
            timed_out(result)


def test_a_client_that_leaves_cancels_its_fetch(server: SpawnedServer) -> None:
    with drip_server() as drip:
        with pytest.raises(httpx.ReadTimeout):
            speak(server, drip.url, ATTACKER, timeout=1.5)
        left = time.monotonic()
        assert wait_for(lambda: drip.closed, PROMPT_S), "the fetch went on after its client left"
        assert drip.closed[0] - left < 3
        print(f"fetch socket closed {drip.closed[0] - left:.2f} s after the client left")


async def test_a_vllm_socket_that_closes_cancels_its_config_fetch(server: SpawnedServer) -> None:
    """The vllm-omni socket loads a session.config's reference before it reads on; a
    close during that load cancels the fetch (before: it ran to its deadline)."""
    url = server.url.replace("/ws", "/stream")
    headers = {"authorization": f"Bearer {ATTACKER}"}
    with drip_server() as drip:
        async with websockets.connect(url, additional_headers=headers) as ws:
            config = {"type": "session.config", "ref_audio": drip.url, "ref_text": "words"}
            await ws.send(json.dumps(config))
            assert await asyncio.to_thread(wait_for, lambda: drip.opened, PROMPT_S)
        left = time.monotonic()
        closed = await asyncio.to_thread(wait_for, lambda: drip.closed, PROMPT_S)
        assert closed, "the fetch went on after its socket closed"
        assert drip.closed[0] - left < 3
        print(f"fetch socket closed {drip.closed[0] - left:.2f} s after the socket closed")


def test_sigterm_exits_promptly_while_drips_are_in_flight(
    base_checkpoint: Path, tmp_path: Path
) -> None:
    with spawn(base_checkpoint, tmp_path) as running, drip_server() as drip:
        pool = ThreadPoolExecutor(DRIPS)
        for _ in range(DRIPS):
            pool.submit(speak, running, drip.url, ATTACKER, 60)
        assert wait_for(lambda: len(drip.opened) >= DRIPS, 10)
        assert running.process is not None
        started = time.monotonic()
        running.process.send_signal(signal.SIGTERM)
        try:
            running.process.wait(20)
        except Exception:  # noqa: BLE001
            pytest.fail("the server did not exit within 20 s of SIGTERM with drips in flight")
        exit_s = time.monotonic() - started
        print(f"exited {exit_s:.2f} s after SIGTERM")
        pool.shutdown(wait=True)
        assert exit_s < 10, exit_s
        assert wait_for(lambda: drip.open_now == 0, 3)


def test_a_batch_fetches_its_shared_url_once(server: SpawnedServer) -> None:
    with file_server(REF_WAV) as files:
        body = {
            "ref_audio": files.url(),
            "x_vector_only_mode": True,
            "response_format": "pcm",
            "items": [{"input": f"Item {i}."} for i in range(8)],
            **SHORT,
        }
        response = httpx.post(
            server.http + "/v1/audio/speech/batch",
            json=body,
            headers={"authorization": f"Bearer {BYSTANDER}"},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        out = response.json()
        assert out["succeeded"] == 8, out["results"][0]
        assert files.gets == 1
