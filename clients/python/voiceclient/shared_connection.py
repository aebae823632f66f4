"""One kept-alive VoiceClient that many users share, reopened when it was lost."""

from __future__ import annotations

import asyncio
from typing import Any

from voiceclient.client import VoiceClient


class SharedConnection:
    """Opens the socket on first use and hands the same client to every caller; when
    the connection was lost (server restart, idle timeout), the next caller gets a
    fresh one. Contexts of one client are independent, so sharing is safe."""

    def __init__(self, url: str, api_key: str | None = None, **session_defaults: Any) -> None:
        self._url = url
        self._api_key = api_key
        self._defaults = session_defaults
        self._client: VoiceClient | None = None
        self._lock = asyncio.Lock()
        self.connects = 0
        """How many sockets were opened so far (1 while the first one lives)."""

    @property
    def current(self) -> VoiceClient | None:
        """The open client, if any (no connecting)."""
        if self._client is not None and not self._client.closed:
            return self._client
        return None

    async def get(self) -> VoiceClient:
        """The open client; connects (raising VoiceConnectionError) when there is none."""
        async with self._lock:
            if self._client is None or self._client.closed:
                self._client = await VoiceClient.connect(self._url, self._api_key, **self._defaults)
                self.connects += 1
            return self._client

    async def aclose(self) -> None:
        async with self._lock:
            client, self._client = self._client, None
        if client is not None:
            await client.close()
