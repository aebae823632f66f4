"""The Starlette application factory."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route, WebSocketRoute

from voiceserver.config import ModelConfig, ServerConfig
from voiceserver.http.auth import mint_token
from voiceserver.http.batch import speech_batch
from voiceserver.http.budget import ClientBudget
from voiceserver.http.info import health, list_models
from voiceserver.http.metrics import metrics_endpoint
from voiceserver.http.speech import speech
from voiceserver.http.voices import create_voice, delete_voice, get_voice, list_voices
from voiceserver.http.web import web_routes
from voiceserver.runtime import Runtime
from voiceserver.transport.compat_cartesia import cartesia_routes
from voiceserver.transport.compat_elevenlabs import elevenlabs_routes
from voiceserver.transport.compat_vllm import vllm_speech_stream
from voiceserver.transport.hosts import HostGuard, HostPolicy
from voiceserver.transport.origin import OriginGuard
from voiceserver.transport.tokens import TokenSigner
from voiceserver.transport.ws import speech_websocket

log = logging.getLogger(__name__)


def create_app(server: ServerConfig, model_config: ModelConfig) -> Starlette:
    hosts = HostPolicy.build(server.host, server.allowed_hosts)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if not server.api_keys:
            log.warning("NO API KEYS CONFIGURED: the server accepts every client (pass --api-key)")
        _log_hosts(hosts)
        runtime = await asyncio.to_thread(Runtime.build, server, model_config)
        runtime.attach(asyncio.get_running_loop())
        app.state.runtime = runtime
        try:
            yield
        finally:
            await asyncio.to_thread(runtime.close)

    routes = [
        Route("/health", health),
        Route("/v1/models", list_models),
        Route("/metrics", metrics_endpoint),
        Route("/v1/audio/speech", speech, methods=["POST"]),
        Route("/v1/audio/speech/batch", speech_batch, methods=["POST"]),
        Route("/v1/audio/voices", list_voices, methods=["GET"]),
        Route("/v1/audio/voices", create_voice, methods=["POST"]),
        Route("/v1/audio/voices/{name}", delete_voice, methods=["DELETE"]),
        Route("/v1/audio/voices/{name}", get_voice, methods=["GET"]),
        Route("/v1/auth/tokens", mint_token, methods=["POST"]),
        WebSocketRoute("/v1/audio/speech/ws", speech_websocket),
        WebSocketRoute("/v1/audio/speech/stream", vllm_speech_stream),
        *elevenlabs_routes(),
        *cartesia_routes(),
        *web_routes(server.demo_page),
    ]
    middleware = [
        Middleware(HostGuard, policy=hosts),  # first: a misdirected request gets nothing
        Middleware(OriginGuard, allowed_origins=server.allowed_origins),
        Middleware(ClientBudget),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    # One secret per app: a restart or another instance invalidates its tokens.
    app.state.token_signer = TokenSigner()
    return app


def _log_hosts(hosts: HostPolicy) -> None:
    if hosts.public and not hosts.any_host:
        log.warning(
            "bound to %s. %s; a request naming any other host gets 421 host_not_allowed"
            " (a guard against DNS rebinding). If clients reach this server by name (a"
            " proxy that keeps the Host header, a DNS name), start it with --allowed-host"
            " NAME (repeatable; .example.com for a domain and its subdomains; '*' turns"
            " the check off)",
            hosts.bind,
            hosts.describe(),
        )
    else:
        log.info("%s; add a name with --allowed-host NAME", hosts.describe())
