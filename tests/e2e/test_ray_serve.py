"""The voice server on Ray Serve: a local Ray cluster, two replicas of the Piper default
deployed by ``python -m voiceserver.ray_serve`` (what ``voiceserver ray`` runs), every
client through Serve's HTTP proxy on a real socket.

One deployment for the module (Ray and two replicas take ~20 s to start on two
cores); the tests run in order and the last one redeploys it.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import ray
import websockets
from ray import serve

from bench.spawn import free_port
from tests.serving import RunningServer, run_server
from tests.vllm_session import vllm_session
from tests.wsclient import Client
from voiceserver.config import ServerConfig, load_model_config
from voiceserver.ray_serve.app import application_of
from voiceserver.ray_serve.deployment import DEPLOYMENT_NAME
from voiceserver.ray_serve.options import parse
from voiceserver.ray_serve.replica_header import REPLICA_HEADER

pytestmark = pytest.mark.slow

APP = "voiceserver"
KEY = "ray-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
SHUTDOWN_S = 8.0
"""Long enough for the ended contexts to finish on a loaded 2-core machine (~3 s)."""
NOISELESS = ("--option", "noise_scale=0", "--option", "noise_w_scale=0")
ARGS = (
    *NOISELESS,
    "--shutdown-timeout",
    str(SHUTDOWN_S),
    "--api-key",
    KEY,
    "--cpus-per-replica",
    "1",
    "--log-level",
    "warning",
)
START_S = 180.0
OBJECT_STORE_BYTES = 128 << 20
TEXT = "Hello there, how are you today? The weather is lovely."
LONG_TEXT = "This sentence is one of many in a long story. " * 12


@dataclass
class Cluster:
    port: int
    main: subprocess.Popen[bytes]
    log: Path

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/audio/speech/ws"

    @property
    def proxy(self) -> RunningServer:
        """The proxy's address in the shape the shared test clients take."""
        return RunningServer("127.0.0.1", self.port, app=None)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])


def _replica_tag(http: str) -> str | None:
    try:
        response = httpx.get(f"{http}/health", timeout=5)
    except httpx.HTTPError:
        return None
    return response.headers.get(REPLICA_HEADER) if response.status_code == 200 else None


def _running_replicas() -> int:
    try:
        app = serve.status().applications.get(APP)
    except Exception:  # the controller is still starting
        return 0
    if app is None or DEPLOYMENT_NAME not in app.deployments:
        return 0
    return app.deployments[DEPLOYMENT_NAME].replica_states.get("RUNNING", 0)


def _wait_for(
    predicate: Callable[[], bool], timeout: float, what: str, cluster: Cluster | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if cluster is not None and cluster.main.poll() is not None:
            raise RuntimeError(f"voiceserver ray exited early:\n{cluster.tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"not within {timeout:g} s: {what}\n{cluster.tail() if cluster else ''}"
            )
        time.sleep(0.25)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    sigterm = signal.getsignal(signal.SIGTERM)  # ray.init replaces it for this process
    # Logical CPUs (a replica reserves one); a small object store: nothing large is shared.
    ray.init(
        num_cpus=4,
        object_store_memory=OBJECT_STORE_BYTES,
        include_dashboard=False,
        log_to_driver=False,
    )
    port = free_port()
    log = tmp_path_factory.mktemp("voiceserver-ray") / "main.log"
    command = [
        sys.executable,
        "-m",
        "voiceserver.ray_serve",
        "--address",
        ray.get_runtime_context().gcs_address,
        "--port",
        str(port),
        "--replicas",
        "2",
        *ARGS,
    ]
    with log.open("wb") as out:
        main = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    running = Cluster(port, main, log)
    try:
        _wait_for(lambda: _running_replicas() == 2, START_S, "two replicas", running)
        _wait_for(lambda: _replica_tag(running.http) is not None, 30, "the proxy", running)
        yield running
    finally:
        main.send_signal(signal.SIGINT)  # Ctrl-C: voiceserver ray deletes the app and exits
        try:
            exited = main.wait(timeout=60)
        except subprocess.TimeoutExpired:
            main.kill()
            exited = None
        serve.shutdown()
        ray.shutdown()
        signal.signal(signal.SIGTERM, sigterm)
    assert exited == 0, running.tail()


@pytest.fixture(scope="module")
def direct() -> Iterator[RunningServer]:
    """One plain server of the same model: the reference a replica must equal."""
    config = load_model_config("piper-joe", {"noise_scale": 0, "noise_w_scale": 0})
    with run_server(config, ServerConfig(api_keys=(KEY,))) as server:
        yield server


async def speak(url: str, text: str) -> tuple[bytes, str]:
    """One native session, one context: its PCM and the replica that served it."""
    client = await Client.connect(url, additional_headers=AUTH)
    await client.send(type="text.append", context_id="a", text=text)
    await client.send(type="context.end", context_id="a")
    await client.until("context.done", "a")
    await client.ws.close()
    return bytes(client.got.audio["a"]), client.ws.response.headers.get(REPLICA_HEADER, "")


async def speak_flushed(url: str, text: str) -> bytes:
    """A context left open after a flushed text: its PCM up to ``context.flushed``."""
    client = await Client.connect(url, additional_headers=AUTH)
    await client.send(type="text.append", context_id="a", text=text, flush=True)
    await client.until("context.flushed", "a")
    await client.ws.close()
    return bytes(client.got.audio["a"])


async def test_native_socket_through_the_proxy_equals_a_direct_server(
    cluster: Cluster, direct: RunningServer
) -> None:
    expected, _ = await speak(direct.ws, TEXT)
    assert len(expected) > 24000  # over half a second of 24 kHz s16 audio
    for _ in range(2):
        audio, replica = await speak(cluster.ws, TEXT)
        assert replica
        assert audio == expected


async def test_vllm_socket_through_the_proxy_equals_a_direct_server(
    cluster: Cluster, direct: RunningServer
) -> None:
    config = {"response_format": "pcm"}
    expected = await vllm_session(direct, config, TEXT, AUTH)
    assert len(expected) > 24000
    assert await vllm_session(cluster.proxy, config, TEXT, AUTH) == expected


def test_http_speech_through_the_proxy_equals_a_direct_server(
    cluster: Cluster, direct: RunningServer
) -> None:
    body = {"model": "tts-1", "input": TEXT, "voice": "alloy", "response_format": "pcm"}
    url = "/v1/audio/speech"
    expected = httpx.post(f"{direct.http}{url}", json=body, headers=AUTH, timeout=60)
    assert expected.status_code == 200 and len(expected.content) > 24000
    response = httpx.post(f"{cluster.http}{url}", json=body, headers=AUTH, timeout=60)
    assert response.status_code == 200, response.text
    assert response.headers.get(REPLICA_HEADER)
    assert response.content == expected.content


async def test_sessions_spread_over_both_replicas(cluster: Cluster) -> None:
    clients = [await Client.connect(cluster.ws, additional_headers=AUTH) for _ in range(6)]
    try:
        replicas = [c.ws.response.headers.get(REPLICA_HEADER) for c in clients]
        assert len(set(replicas)) == 2, replicas
        # Each session is served where it landed, all at once.
        for client in clients:
            await client.send(type="text.append", context_id="a", text=TEXT)
            await client.send(type="context.end", context_id="a")
        await asyncio.gather(*(c.until("context.done", "a") for c in clients))
        assert len({bytes(c.got.audio["a"]) for c in clients}) == 1
    finally:
        await asyncio.gather(*(c.ws.close() for c in clients))


async def test_a_connect_token_from_one_replica_opens_sockets_on_every_replica(
    cluster: Cluster,
) -> None:
    """A browser's backend mints a token (some replica answers); the page's sockets may
    land on any replica, and each must take it."""
    minted = httpx.post(f"{cluster.http}/v1/auth/tokens", json={}, headers=AUTH, timeout=30)
    assert minted.status_code == 200, minted.text
    token = minted.json()["token"]
    url = f"{cluster.ws}?token={token}"
    clients = [await Client.connect(url) for _ in range(6)]  # held open: both replicas
    try:
        replicas = {c.ws.response.headers.get(REPLICA_HEADER) for c in clients}
        assert len(replicas) == 2, replicas
    finally:
        await asyncio.gather(*(c.ws.close() for c in clients))
    # A token the deployment never minted opens nothing.
    forged = f"{token[:-4]}0000" if not token.endswith("0000") else f"{token[:-4]}1111"
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(f"{cluster.ws}?token={forged}")
    assert refused.value.response.status_code == 401


async def _finish(client: Client) -> tuple[list[dict], int | None, str]:
    """Everything until the socket closes: messages, close code, reason."""
    try:
        async with asyncio.timeout(60):
            while True:
                await client.next_any()
    except websockets.ConnectionClosed as closed:
        if closed.rcvd is None:
            return client.got.messages, None, ""
        return client.got.messages, closed.rcvd.code, closed.rcvd.reason


async def test_a_killed_replica_closes_its_sessions_and_serve_restarts_it(
    cluster: Cluster, direct: RunningServer
) -> None:
    expected, _ = await speak(direct.ws, LONG_TEXT)
    clients = [await Client.connect(cluster.ws, additional_headers=AUTH) for _ in range(4)]
    replicas = [c.ws.response.headers.get(REPLICA_HEADER) for c in clients]
    assert len(set(replicas)) == 2, replicas
    victim = replicas[0]
    for client in clients:
        await client.send(type="text.append", context_id="a", text=LONG_TEXT)
        await client.send(type="context.end", context_id="a")
    await asyncio.gather(*(c.until_audio("a") for c in clients))

    ray.kill(ray.get_actor(f"SERVE_REPLICA::{APP}#{DEPLOYMENT_NAME}#{victim}", namespace="serve"))
    lost = [c for c, r in zip(clients, replicas, strict=True) if r == victim]
    kept = [c for c, r in zip(clients, replicas, strict=True) if r != victim]
    for messages, code, reason in await asyncio.gather(*(_finish(c) for c in lost)):
        assert code == 1011 and "replica lost" in reason, (code, reason)
        assert "context.done" not in [m["type"] for m in messages]
    # The other replica's sessions go on to the end, every sample there.
    for client in kept:
        await client.until("context.done", "a")
        assert bytes(client.got.audio["a"]) == expected
        await client.ws.close()

    # New sessions land on the survivor until Serve has replaced the dead replica.
    audio, replica = await speak(cluster.ws, TEXT)
    assert replica != victim and audio
    survivor = next(r for r in replicas if r != victim)
    seen: set[str] = set()

    def replaced() -> bool:
        tag = _replica_tag(cluster.http)
        if tag is not None:
            seen.add(tag)
        return bool(seen - {victim, survivor}) and _running_replicas() == 2

    await asyncio.to_thread(_wait_for, replaced, 120, "a replacement replica", cluster)
    assert victim not in seen


async def test_a_redeploy_drains_each_replica_without_losing_accepted_text(
    cluster: Cluster, direct: RunningServer
) -> None:
    """A redeploy replaces every replica, one after another: contexts already ended are
    spoken to the end, then the socket closes with 1012; a context still open when the
    drain began is spoken up to its flush, then cut (``server_shutdown``, 1012) at the
    shutdown timeout."""
    expected, _ = await speak(direct.ws, TEXT)
    flushed = await speak_flushed(direct.ws, TEXT)
    ended = [await Client.connect(cluster.ws, additional_headers=AUTH) for _ in range(4)]
    held = [await Client.connect(cluster.ws, additional_headers=AUTH) for _ in range(2)]
    replicas = {c.ws.response.headers.get(REPLICA_HEADER) for c in ended + held}
    assert len(replicas) == 2, replicas
    for client in ended:
        await client.send(type="text.append", context_id="a", text=TEXT)
        await client.send(type="context.end", context_id="a")
    for client in held:
        await client.send(type="text.append", context_id="a", text=TEXT, flush=True)
    app, _ = application_of(parse([*ARGS, "--replicas", "2"]))
    redeploy = asyncio.create_task(asyncio.to_thread(serve.run, app, name=APP))
    results = await asyncio.gather(*(_finish(c) for c in ended + held))
    await redeploy

    for client, (messages, code, _) in zip(ended, results[: len(ended)], strict=True):
        assert [m["type"] for m in messages][-1] == "context.done", messages
        assert bytes(client.got.audio["a"]) == expected
        assert code == 1012
    for client, (messages, code, _) in zip(held, results[len(ended) :], strict=True):
        kinds = [m["type"] for m in messages]
        assert kinds[-2:] == ["context.flushed", "error"], messages
        assert messages[-1]["code"] == "server_shutdown"
        assert bytes(client.got.audio["a"]) == flushed
        assert code == 1012
    # Two new replicas serve.
    new = {_replica_tag(cluster.http) for _ in range(6)}
    assert new and not new & replicas
