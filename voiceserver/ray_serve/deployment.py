"""The Serve deployment: one whole voice server (model, engine, endpoints) per replica.

Each replica builds the same Starlette app as ``voiceserver serve``
(:func:`voiceserver.app.create_app`); Serve runs its lifespan at replica start (the
model loads and the engine starts there) and again at the end (``Runtime.close``).
Serve's HTTP proxy routes each HTTP request and each WebSocket session, for its whole
life, to one replica. What the replica adds around the app:

- the ``x-voiceserver-replica`` header (:mod:`.replica_header`);
- draining on Serve's graceful shutdown (:mod:`.drain`): the app's Lifecycle drains as
  on SIGTERM, so busy sessions finish and the rest close with 1012;
- ``record_autoscaling_stats``: active streams for :mod:`.autoscaling`;
- ``check_health``: the app's own ``GET /health``, so whatever it reports as broken
  gets the replica replaced;
- one connect-token secret for every replica of a deployment (made when the application
  is built), so a token minted by one replica opens sockets on all of them.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

from ray import serve
from ray.serve.config import AutoscalingConfig, AutoscalingPolicy
from starlette.applications import Starlette
from starlette.types import ASGIApp, Message

from voiceserver.app import create_app
from voiceserver.config import ModelConfig, ServerConfig
from voiceserver.ray_serve.autoscaling import ACTIVE_STREAMS, POLICY_PATH
from voiceserver.ray_serve.drain import on_replica_drain
from voiceserver.ray_serve.options import WAIT_LOOP_S, ReplicaOptions
from voiceserver.ray_serve.replica_header import ReplicaHeader
from voiceserver.transport.tokens import TokenSigner

log = logging.getLogger(__name__)

DEPLOYMENT_NAME = "VoiceServer"
HEALTH_TIMEOUT_S = 10.0


@serve.ingress()
class VoiceServer:
    """One replica: the voice server's app, built on the replica at start-up."""

    def __init__(self, server: ServerConfig, model: ModelConfig, token_secret: bytes) -> None:
        self._server_config = server
        self._model_config = model
        self._token_secret = token_secret
        self._voice_app: Starlette | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: asyncio.Task[None] | None = None

    def __serve_build_asgi_app__(self) -> ASGIApp:
        """Serve calls this once on the replica's event loop, then runs the lifespan."""
        self._loop = asyncio.get_running_loop()
        self._voice_app = create_app(self._server_config, self._model_config)
        self._voice_app.state.token_signer = TokenSigner(self._token_secret)
        on_replica_drain(self._drain_requested)
        return ReplicaHeader(self._voice_app, serve.get_replica_context().replica_tag)

    def _drain_requested(self) -> None:
        """On Serve's thread: the controller is taking this replica out."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        runtime = self._runtime()
        if runtime is None or self._drain is not None:
            return
        log.info(
            "Serve is draining this replica: open contexts get up to %.1f s to finish",
            self._server_config.shutdown_timeout_s,
        )
        self._drain = asyncio.ensure_future(
            runtime.lifecycle.drain(self._server_config.shutdown_timeout_s)
        )

    def _runtime(self) -> Any:
        return getattr(self._voice_app.state, "runtime", None) if self._voice_app else None

    async def record_autoscaling_stats(self) -> dict[str, float]:
        runtime = self._runtime()
        if runtime is None:
            return {ACTIVE_STREAMS: 0.0}
        return {ACTIVE_STREAMS: _gauge_total(runtime.metrics.active)}

    async def check_health(self) -> None:
        """Raises (Serve then replaces the replica) unless the app's ``/health`` is 200."""
        if self._voice_app is None or self._runtime() is None:
            raise RuntimeError("the voice server app has not started")
        status = await asyncio.wait_for(_get_status(self._voice_app, "/health"), HEALTH_TIMEOUT_S)
        if status != 200:
            raise RuntimeError(f"GET /health answered {status}")


def build_application(
    server: ServerConfig, model: ModelConfig, options: ReplicaOptions, replicas: int
) -> Any:
    """The Serve application (``Deployment.bind``) for ``serve.run`` or an app builder.
    ``replicas`` is the fixed count (ignored when ``options`` autoscale)."""
    settings: dict[str, Any] = {
        "name": DEPLOYMENT_NAME,
        "ray_actor_options": {
            "num_cpus": options.cpus_per_replica,
            "num_gpus": options.gpus_per_replica,
        },
        "max_ongoing_requests": options.max_ongoing_requests,
        "graceful_shutdown_timeout_s": options.graceful_shutdown_timeout_s,
        "graceful_shutdown_wait_loop_s": WAIT_LOOP_S,
    }
    if options.autoscaling:
        settings["autoscaling_config"] = AutoscalingConfig(
            min_replicas=options.min_replicas,
            max_replicas=options.max_replicas,
            upscale_delay_s=options.upscale_delay_s,
            downscale_delay_s=options.downscale_delay_s,
            policy=AutoscalingPolicy(
                policy_function=POLICY_PATH,
                policy_kwargs={"target_streams": options.target_streams},
            ),
        )
    else:
        settings["num_replicas"] = replicas
    deployment = serve.deployment(VoiceServer).options(**settings)
    return deployment.bind(server, model, secrets.token_bytes(32))


def _gauge_total(gauge: Any) -> float:
    """A labelled prometheus gauge summed over its label sets."""
    return float(
        sum(
            sample.value
            for family in gauge.collect()
            for sample in family.samples
            if sample.name == family.name
        )
    )


async def _get_status(app: ASGIApp, path: str) -> int:
    """One GET through the app in this process (its middlewares included)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
    }
    status = 0
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the request has no more to give
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status
