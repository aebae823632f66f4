"""What the Cartesia compatibility tests share: the Piper voice as they serve it, and the
server's own count of open engine contexts (read with the test server's key)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import httpx

from tests.serving import RunningServer
from voiceserver.config import ModelConfig, load_model_config


def piper_config() -> ModelConfig:
    """Piper, noise-free (the same text gives the same audio), admitting contexts whatever
    the machine's load (tests run beside other work; refusals by load would be random)."""
    config = load_model_config("piper-joe", {"noise_scale": 0, "noise_w_scale": 0})
    return replace(config, engine=replace(config.engine, admission_load=0.0))


async def engine_contexts(server: RunningServer, key: str) -> int:
    async with httpx.AsyncClient(headers={"X-API-Key": key}) as http:
        health = (await http.get(f"{server.http}/health")).json()
    return int(health["engine"]["active_contexts"])


async def wait_for_no_contexts(server: RunningServer, key: str) -> int:
    """Poll until the engine has no context open (5 s at most); the last count."""
    count = await engine_contexts(server, key)
    for _ in range(200):
        if count == 0:
            break
        await asyncio.sleep(0.025)
        count = await engine_contexts(server, key)
    return count
