"""What the ElevenLabs compatibility tests share: the Piper voice served with a key, the
server's own count of open engine contexts, and checks of the alignment messages."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx

from tests.serving import RunningServer, run_server
from voiceserver.config import Limits, ModelConfig, ServerConfig, load_model_config

KEY = "elevenlabs-test-key"
VOICE = "joe"
LIMITS = Limits(max_contexts=8, max_text_chars=2000, max_message_bytes=64 * 1024)


def piper_config() -> ModelConfig:
    """Piper, noise-free (the same text gives the same audio), admitting contexts whatever
    the machine's load (tests run beside other work; refusals by load would be random)."""
    config = load_model_config("piper-joe", {"noise_scale": 0, "noise_w_scale": 0})
    return replace(config, engine=replace(config.engine, admission_load=0.0))


@contextlib.contextmanager
def piper_server() -> Iterator[RunningServer]:
    with run_server(piper_config(), ServerConfig(api_keys=(KEY,), limits=LIMITS)) as server:
        yield server


async def engine_contexts(server: RunningServer) -> int:
    async with httpx.AsyncClient(headers={"xi-api-key": KEY}) as http:
        health = (await http.get(f"{server.http}/health")).json()
    return int(health["engine"]["active_contexts"])


async def wait_for_no_contexts(server: RunningServer, seconds: float = 5.0) -> int:
    """Poll until the engine has no context open (``seconds`` at most); the last count."""
    count = await engine_contexts(server)
    for _ in range(int(seconds / 0.025)):
        if count == 0:
            break
        await asyncio.sleep(0.025)
        count = await engine_contexts(server)
    return count


def chunk_spans(messages: list[dict[str, Any]], key: str = "alignment") -> list[int]:
    """Each aligned message's span: its last character's start plus duration."""
    spans = []
    for message in messages:
        alignment = message.get(key)
        if alignment:
            spans.append(alignment["charStartTimesMs"][-1] + alignment["charDurationsMs"][-1])
    return spans


def aligned_text(messages: list[dict[str, Any]], key: str = "alignment") -> str:
    return "".join("".join(message[key]["chars"]) for message in messages if message.get(key))
