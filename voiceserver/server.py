"""The uvicorn server this project runs: guarded protocols, graceful drain.

``voiceserver serve`` and the tests both build the server here, so what is
tested is what runs.
"""

from __future__ import annotations

import socket

import uvicorn
from starlette.applications import Starlette

from voiceserver.config import ServerConfig
from voiceserver.logs import redact_tokens
from voiceserver.runtime import Runtime
from voiceserver.transport.protocols import GuardedWebSocketProtocol, http_protocol

PING_INTERVAL_S = 20.0
WRITE_STALL_FACTOR = 2
"""An HTTP connection whose answers stay stuck this many times
``slow_reader_timeout_s`` (its client reads nothing) is reset."""
LEFTOVER_TIMEOUT_S = 2
"""After the drain, how long uvicorn waits for leftover connections before cancelling."""


class VoiceServer(uvicorn.Server):
    """uvicorn.Server whose shutdown first drains the application (see
    :mod:`voiceserver.lifecycle`): stop accepting, let running contexts finish up to
    ``shutdown_timeout_s``, cut the rest, then close what is left."""

    def __init__(self, config: uvicorn.Config, app: Starlette, shutdown_timeout_s: float):
        super().__init__(config)
        self._app = app
        self._shutdown_timeout_s = shutdown_timeout_s

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in getattr(self, "servers", []):
            server.close()  # stop accepting before anything else
        runtime: Runtime | None = getattr(self._app.state, "runtime", None)
        if runtime is not None:
            await runtime.lifecycle.drain(self._shutdown_timeout_s, lambda: self.force_exit)
        await super().shutdown(sockets)


def build_server(app: Starlette, server: ServerConfig, log_level: str = "info") -> VoiceServer:
    config = uvicorn.Config(
        app,
        host=server.host,
        port=server.port,
        log_level=log_level,
        http=http_protocol(
            server.limits.http_header_timeout_s,
            server.limits.max_header_bytes,
            # The endpoints' own send deadline (which reports slow_reader) acts first.
            write_stall_s=WRITE_STALL_FACTOR * server.limits.slow_reader_timeout_s,
        ),
        ws=GuardedWebSocketProtocol,
        ws_max_size=server.limits.transport_max_bytes,
        ws_ping_interval=PING_INTERVAL_S,
        ws_ping_timeout=PING_INTERVAL_S,
        lifespan="on",
        timeout_graceful_shutdown=LEFTOVER_TIMEOUT_S,
    )
    redact_tokens()  # after uvicorn.Config, which (re)configures its loggers
    return VoiceServer(config, app, server.shutdown_timeout_s)
