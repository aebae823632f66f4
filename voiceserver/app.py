"""The Starlette application factory."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute

from voiceserver.config import ModelConfig, ServerConfig
from voiceserver.http.info import health, list_models
from voiceserver.runtime import Runtime
from voiceserver.transport.ws import speech_websocket

log = logging.getLogger(__name__)


def create_app(server: ServerConfig, model_config: ModelConfig) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if not server.api_keys:
            log.warning("NO API KEYS CONFIGURED: the server accepts every client (pass --api-key)")
        runtime = await asyncio.to_thread(Runtime.build, server, model_config)
        app.state.runtime = runtime
        try:
            yield
        finally:
            await asyncio.to_thread(runtime.close)

    routes = [
        Route("/health", health),
        Route("/v1/models", list_models),
        WebSocketRoute("/v1/audio/speech/ws", speech_websocket),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
