"""DNS rebinding: a web page whose name now resolves to 127.0.0.1 is refused by Host.

The attack: a page at ``http://evil.example:8000`` re-points ``evil.example`` to
127.0.0.1; the browser then sends ``Host: evil.example:8000`` and ``Origin:
http://evil.example:8000`` to the local server. The Origin check alone compares the
two, finds them equal, and (before this check) the page got audio, CORS headers and
sockets. Now the server answers only Host names it knows: loopback names, IP
addresses, its own ``--host`` name and ``--allowed-host`` ones; anything else gets
421 ``host_not_allowed`` before any endpoint or WebSocket upgrade runs.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpx
import pytest
import websockets

from bench.spawn import spawn_server
from tests.e2e.rawhttp import exchange, head, websocket_handshake
from tests.serving import RunningServer, run_server
from tests.wsclient import Client
from voiceserver.config import ServerConfig, load_model_config

SOCKETS = ("/v1/audio/speech/ws", "/v1/audio/speech/stream")


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with run_server(load_model_config("tiny")) as running:
        yield running


def rebound(server: RunningServer, name: str = "evil.example") -> dict[str, str]:
    """The headers a browser sends once ``name`` resolves to this server."""
    return {"host": f"{name}:{server.port}", "origin": f"http://{name}:{server.port}"}


def assert_host_refused(status: int, body: bytes, host: str) -> None:
    assert status == 421, (status, body[:200])
    error = json.loads(body)["error"]
    assert error["code"] == "host_not_allowed"
    assert host in error["message"] and "--allowed-host" in error["message"]


def test_a_rebound_page_gets_no_audio_and_no_cors(server: RunningServer) -> None:
    headers = rebound(server)
    with httpx.Client(base_url=server.http, timeout=30) as http:
        answer = http.post("/v1/audio/speech", json={"input": "hi"}, headers=headers)
        assert_host_refused(answer.status_code, answer.content, headers["host"])
        assert "access-control-allow-origin" not in answer.headers
        preflight = http.options(
            "/v1/audio/speech", headers={**headers, "access-control-request-method": "POST"}
        )
        assert preflight.status_code == 421
        assert "access-control-allow-origin" not in preflight.headers
        for path in ("/health", "/v1/models", "/metrics", "/", "/sdk/voiceserver.js"):
            assert http.get(path, headers=headers).status_code == 421, path


@pytest.mark.parametrize("path", SOCKETS)
def test_a_rebound_page_cannot_open_a_socket(server: RunningServer, path: str) -> None:
    headers = rebound(server)
    data = websocket_handshake(path, headers["host"], [("Origin", headers["origin"])])
    answer = exchange(server.host, server.port, data)
    assert_host_refused(answer.status, answer.body, headers["host"])


async def test_a_real_client_on_a_rebound_name_is_refused(server: RunningServer) -> None:
    """The same with a WebSocket client that resolves evil.example to the server."""
    sock = socket.create_connection((server.host, server.port))
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(
            f"ws://evil.example:{server.port}/v1/audio/speech/ws",
            sock=sock,
            origin=f"http://evil.example:{server.port}",  # type: ignore[arg-type]
        )
    assert refused.value.response.status_code == 421


@pytest.mark.parametrize(
    "name", ["127.0.0.1", "localhost", "LOCALHOST", "[::1]", "app.localhost", "localhost."]
)
async def test_loopback_names_still_work(server: RunningServer, name: str) -> None:
    host = f"{name}:{server.port}"
    with httpx.Client(base_url=server.http, timeout=30) as http:
        assert http.get("/health", headers={"host": host}).status_code == 200
        assert http.get("/health", headers={"host": name}).status_code == 200
        spoken = http.post(
            "/v1/audio/speech",
            json={"input": "hi"},
            headers={"host": host, "origin": f"http://{host}"},
        )
        assert spoken.status_code == 200 and spoken.content
        assert spoken.headers["access-control-allow-origin"] == f"http://{host}"
    for path in SOCKETS:
        data = websocket_handshake(path, host, [("Origin", f"http://{host}")])
        assert exchange(server.host, server.port, data).status == 101, path
    # A whole session, from a client that reached the server by that name.
    sock = socket.create_connection((server.host, server.port))
    client = await Client.connect(f"ws://{host}/v1/audio/speech/ws", sock=sock)
    await client.send(type="text.append", context_id="a", text="Hello there.")
    await client.send(type="context.end", context_id="a")
    await client.until("context.done", "a")
    assert client.got.audio["a"]
    await client.close()


def test_ip_addresses_are_never_rebinding(server: RunningServer) -> None:
    """A page can only have an IP address as its Host when it was served from that
    address, so addresses pass (load balancers and kubelet probes send one)."""
    with httpx.Client(base_url=server.http, timeout=30) as http:
        for host in ("10.1.2.3:8000", "192.168.0.7", "[2001:db8::5]:9000", "0.0.0.0"):
            assert http.get("/health", headers={"host": host}).status_code == 200, host


def test_host_is_required_on_http_1_1(server: RunningServer) -> None:
    missing = exchange(server.host, server.port, head("GET", "/health", []))
    assert missing.status == 400
    assert missing.json()["error"]["code"] == "missing_host"
    assert "Host" in missing.json()["error"]["message"]
    handshake = exchange(server.host, server.port, websocket_handshake(SOCKETS[0], None))
    assert handshake.status == 400
    twice = exchange(
        server.host,
        server.port,
        head("GET", "/health", [("Host", "127.0.0.1"), ("Host", "evil.example")]),
    )
    assert twice.status == 400
    assert twice.json()["error"]["code"] == "missing_host"
    # HTTP/1.0 predates Host, and browsers never send it: it is let through.
    old = exchange(server.host, server.port, head("GET", "/health", [], version="HTTP/1.0"))
    assert old.status == 200 and old.json()["status"] == "ok"


def test_allowed_host_admits_a_name() -> None:
    config = ServerConfig(allowed_hosts=("tts.example", ".corp.example"))
    with (
        run_server(load_model_config("tiny"), config) as running,
        httpx.Client(base_url=running.http, timeout=30) as http,
    ):
        for name in ("tts.example", "TTS.example", "corp.example", "a.b.corp.example"):
            headers = rebound(running, name)
            spoken = http.post("/v1/audio/speech", json={"input": "hi"}, headers=headers)
            assert spoken.status_code == 200, name
            assert spoken.headers["access-control-allow-origin"] == headers["origin"]
            data = websocket_handshake(SOCKETS[0], headers["host"], [("Origin", headers["origin"])])
            assert exchange(running.host, running.port, data).status == 101
        for name in ("evil.example", "tts.example.evil.example", "xcorp.example"):
            assert http.get("/health", headers=rebound(running, name)).status_code == 421, name


def test_a_star_allows_every_host() -> None:
    config = ServerConfig(allowed_hosts=("*",))
    with (
        run_server(load_model_config("tiny"), config) as running,
        httpx.Client(base_url=running.http, timeout=30) as http,
    ):
        assert http.get("/health", headers=rebound(running)).status_code == 200


def test_the_flag_and_the_start_up_log_of_a_public_server() -> None:
    """Bound to every interface (a deployment behind a proxy): the check stays on, and
    the log says which names are answered and how to add one."""
    with spawn_server("tiny", host="0.0.0.0", args=("--allowed-host", "tts.example")) as spawned:
        port = int(spawned.http.rsplit(":", 1)[1])
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            assert http.get("/health", headers={"host": f"tts.example:{port}"}).status_code == 200
            assert http.get("/health", headers={"host": f"10.0.0.5:{port}"}).status_code == 200
            refused = http.get("/health", headers={"host": f"public.example:{port}"})
            assert refused.status_code == 421
            assert "--allowed-host public.example" in refused.json()["error"]["message"]
        log = spawned.log_path.read_text()
    assert "tts.example" in log and "--allowed-host" in log, log
    assert "public.example" in log, log  # the refusal is logged, with the flag to use


def test_cli_rejects_a_url_as_an_allowed_host() -> None:
    with (
        pytest.raises(RuntimeError, match="--allowed-host: 'https://tts.example/' is not a host"),
        spawn_server("tiny", args=("--allowed-host", "https://tts.example/")),
    ):
        pass
