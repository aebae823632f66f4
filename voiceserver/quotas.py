"""Per-client budgets: a message rate, and counts of what a client holds at once.

Both are kept on the event loop (no locks) and keyed by :class:`ClientId`, so a
client's sockets and HTTP requests share one budget. Entries of clients that hold
nothing and have a full budget are pruned as the tables grow, so a stream of new
addresses costs bounded memory.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass

from voiceserver.clients import ClientId

PRUNE_AT = 4096
"""Table size that triggers a sweep of entries that carry no information."""
TARPIT_S = 1.0
"""Longest wait before a refusal for the rate is answered."""
TARPIT_PER_CLIENT = 8
"""Refusals of one client that may wait at once."""


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    """A token bucket per client: ``rate`` messages a second on average, up to
    ``burst`` at once. ``rate`` 0 disables the limit."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = float(rate)
        self.burst = max(float(burst), 1.0)
        self._buckets: dict[ClientId, _Bucket] = {}
        self._held = ClientCounts(TARPIT_PER_CLIENT)

    async def hold_refusal(self, client: ClientId) -> None:
        """Wait a moment before a refusal is answered (up to ``TARPIT_S``, no longer than
        the client has to wait anyway), so a client that retries the moment it is
        refused retries about once a second instead of a thousand times; only a few of
        a client's refusals wait at once, the rest are answered at once."""
        if not self._held.take(client):
            return
        try:
            await asyncio.sleep(min(TARPIT_S, self.retry_after_s(client)))
        finally:
            self._held.give(client)

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def spend(self, client: ClientId, cost: float = 1.0, now: float | None = None) -> bool:
        """Take ``cost`` from the client's budget; False when it lacks it. A refused
        message is charged too (down to a debt of one burst), so a client that keeps
        sending past its budget gets nothing through until it pauses."""
        if not self.enabled:
            return True
        now = time.monotonic() if now is None else now
        bucket = self._buckets.get(client)
        if bucket is None:
            if len(self._buckets) >= PRUNE_AT:
                self._prune(now)
            bucket = self._buckets[client] = _Bucket(self.burst, now)
        else:
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
        if bucket.tokens < cost:
            bucket.tokens = max(-self.burst, bucket.tokens - cost)
            return False
        bucket.tokens -= cost
        return True

    def retry_after_s(self, client: ClientId, cost: float = 1.0) -> float:
        """Seconds until ``cost`` would be affordable (0 when it is now)."""
        bucket = self._buckets.get(client)
        if not self.enabled or bucket is None:
            return 0.0
        tokens = min(self.burst, bucket.tokens + (time.monotonic() - bucket.at) * self.rate)
        return max(0.0, (cost - tokens) / self.rate)

    def _prune(self, now: float) -> None:
        full = [
            c for c, b in self._buckets.items() if b.tokens + (now - b.at) * self.rate >= self.burst
        ]
        for client in full:
            del self._buckets[client]

    def __len__(self) -> int:
        return len(self._buckets)


class ClientCounts:
    """How many of something each client holds now, against a per-client cap."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._held: Counter[ClientId] = Counter()

    def take(self, client: ClientId) -> bool:
        """Count one more for ``client``; False (nothing counted) at its cap."""
        if self._held[client] >= self.cap:
            return False
        self._held[client] += 1
        return True

    def give(self, client: ClientId) -> None:
        held = self._held[client] - 1
        if held > 0:
            self._held[client] = held
        else:
            del self._held[client]

    def held(self, client: ClientId) -> int:
        return self._held.get(client, 0)

    def __len__(self) -> int:
        return len(self._held)


class RefusalWindow:
    """Refusals of one connection in the current second: a connection that gets more
    than ``limit`` (it sends twice its budget) is to be closed."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self._since = 0.0
        self._count = 0

    def refuse(self, now: float) -> bool:
        """Count one refusal at ``now``; True once the second's refusals pass the limit."""
        if now - self._since >= 1.0:
            self._since, self._count = now, 0
        self._count += 1
        return self._count > self.limit
