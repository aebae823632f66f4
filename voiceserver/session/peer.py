"""The connection a session speaks through, and how a session leaves it.

Sessions are written against :class:`Peer` (the transport adapts a WebSocket),
so they never see a socket library's exceptions: a send to a connection that
is gone raises :class:`PeerGone`, an ordinary departure, never logged as a
failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

FAREWELL_S = 1.0
"""How long a client cut at shutdown gets to receive its last messages and close frame
(a slow reader gets the send deadline instead)."""


class PeerGone(Exception):
    """The connection went away while the session was sending (an ordinary departure)."""


class Peer(Protocol):
    async def send_text(self, data: str) -> None: ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def close(self, code: int, reason: str) -> None: ...

    def abort(self) -> None:
        """Drop the connection now, discarding whatever it has not sent."""


async def say_farewell(
    peer: Peer, messages: Sequence[str], code: int, reason: str, timeout_s: float = FAREWELL_S
) -> None:
    """Send ``messages`` and a close frame if the client takes them within ``timeout_s``;
    else abort the connection, so nothing unsent is kept for a client that reads nothing."""
    try:
        async with asyncio.timeout(timeout_s):
            for text in messages:
                await peer.send_text(text)
            await peer.close(code, reason[:120])
    except (TimeoutError, PeerGone):
        peer.abort()
