"""Opening a WebSocket the way every fuzz session does."""

from __future__ import annotations

from typing import Any

import websockets

CONNECT_TIMEOUT_S = 10.0


async def connect(url: str) -> Any:
    """No compression and no size cap (the fuzzer judges sizes itself), no pings (a
    ping is traffic the step did not send)."""
    return await websockets.connect(
        url,
        max_size=None,
        compression=None,
        open_timeout=CONNECT_TIMEOUT_S,
        close_timeout=5,
        ping_interval=None,
    )
