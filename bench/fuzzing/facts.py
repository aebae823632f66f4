"""What the fuzzer needs to know about the server under test, asked once before a run."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from voiceclient.server_info import get_json

from bench.fuzzing.rules import PCM_RATES, TRANSPORT_FACTOR
from bench.fuzzing.sockets import CONNECT_TIMEOUT_S, connect

WS_PATH = "/v1/audio/speech/ws"
COMPAT_PATH = "/v1/audio/speech/stream"


def _ws(http: str, path: str) -> str:
    return http.replace("http", "ws", 1) + path


@dataclass(frozen=True)
class ServerFacts:
    http: str
    model: str
    voices: tuple[str, ...]
    languages: tuple[str, ...]
    sample_rate: int
    max_contexts: int
    max_text_chars: int
    max_message_bytes: int
    idle_timeout_s: float

    @property
    def ws_url(self) -> str:
        return _ws(self.http, WS_PATH)

    @property
    def compat_url(self) -> str:
        return _ws(self.http, COMPAT_PATH)

    @property
    def transport_max_bytes(self) -> int:
        return TRANSPORT_FACTOR * self.max_message_bytes

    @property
    def bystander_rate(self) -> int:
        # The model's own rate where PCM allows it: nothing is resampled.
        return self.sample_rate if self.sample_rate in PCM_RATES else 24000


async def discover(http: str) -> ServerFacts:
    """Model, voices and session limits of a running server."""
    models = await asyncio.to_thread(get_json, f"{http}/v1/models", timeout=10.0)
    info = models["data"][0]
    async with await connect(_ws(http, WS_PATH)) as ws:
        created = json.loads(await asyncio.wait_for(ws.recv(), CONNECT_TIMEOUT_S))
    limits = created["limits"]
    return ServerFacts(
        http=http,
        model=info["id"],
        voices=tuple(info["voices"]),
        languages=tuple(info["languages"]),
        sample_rate=int(info["sample_rate"]),
        max_contexts=int(limits["max_contexts"]),
        max_text_chars=int(limits["max_text_chars"]),
        max_message_bytes=int(limits["max_message_bytes"]),
        idle_timeout_s=float(limits["idle_timeout_s"]),
    )
