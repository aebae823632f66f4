"""What ``--api-key`` covers: /metrics and /v1/models need the key; /health tells an
unauthenticated caller only that the server is up.

Before, with a key set, ``/metrics`` (every counter), ``/v1/models`` (which names
the checkpoint folder) and ``/health`` (open sessions and engine counters) answered
anyone.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from bench.spawn import spawn_server
from tests.serving import RunningServer, run_server
from voiceserver.config import ServerConfig, load_model_config

KEY = "scope-test-key"
GATED = ("/metrics", "/v1/models")


@pytest.fixture(scope="module")
def keyed() -> Iterator[RunningServer]:
    with run_server(load_model_config("tiny"), ServerConfig(api_keys=(KEY,))) as running:
        yield running


@pytest.fixture(scope="module")
def open_server() -> Iterator[RunningServer]:
    with run_server(load_model_config("tiny")) as running:
        yield running


@pytest.mark.parametrize("path", GATED)
def test_gated_endpoints_need_the_key(keyed: RunningServer, path: str) -> None:
    with httpx.Client(base_url=keyed.http, timeout=30) as http:
        for headers in ({}, {"authorization": "Bearer wrong"}):
            refused = http.get(path, headers=headers)
            assert refused.status_code == 401, (path, refused.text)
            assert refused.json()["error"]["code"] == "unauthorized"
            assert refused.headers["www-authenticate"] == "Bearer"
        allowed = http.get(path, headers={"authorization": f"Bearer {KEY}"})
        assert allowed.status_code == 200, allowed.text
    if path == "/metrics":
        assert "tts_request_duration_seconds" in allowed.text
    else:
        assert allowed.json()["data"][0]["id"]


def test_health_without_the_key_says_only_ok(keyed: RunningServer) -> None:
    with httpx.Client(base_url=keyed.http, timeout=30) as http:
        for headers in ({}, {"authorization": "Bearer wrong"}):
            answer = http.get("/health", headers=headers)
            assert answer.status_code == 200
            assert answer.json() == {"status": "ok"}
        full = http.get("/health", headers={"authorization": f"Bearer {KEY}"}).json()
    assert full["status"] == "ok"
    assert {"model", "sessions", "engine"} <= set(full)


def test_an_open_server_answers_everything(open_server: RunningServer) -> None:
    with httpx.Client(base_url=open_server.http, timeout=30) as http:
        for path in GATED:
            assert http.get(path).status_code == 200, path
        health = http.get("/health").json()
    assert health["status"] == "ok" and "engine" in health and "sessions" in health


def test_a_keyed_server_spawns_and_reports_ready() -> None:
    """bench.spawn polls /health without the key and waits for status "ok"."""
    with (
        spawn_server("tiny", args=("--api-key", KEY)) as spawned,
        httpx.Client(base_url=spawned.http, timeout=30) as http,
    ):
        assert http.get("/health").json() == {"status": "ok"}
        assert http.get("/metrics").status_code == 401
