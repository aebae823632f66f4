"""Waiting on the server's own view of open contexts (GET /health)."""

from __future__ import annotations

import asyncio

import httpx

from tests.serving import RunningServer


async def active_contexts(server: RunningServer) -> int:
    async with httpx.AsyncClient() as http:
        health = (await http.get(f"{server.http}/health")).json()
    return int(health["engine"]["active_contexts"])


async def wait_for_no_contexts(server: RunningServer, polls: int = 200) -> int:
    """Poll /health until the engine has no context open; returns the last count."""
    count = await active_contexts(server)
    for _ in range(polls):
        if count == 0:
            break
        await asyncio.sleep(0.025)
        count = await active_contexts(server)
    return count
