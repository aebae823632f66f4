"""A minimal test-side client over a real WebSocket, built on protocol.ClientSession."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import websockets

from protocol.binary import unpack_audio


@dataclass
class Received:
    """Everything a client saw, in order."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    frames: list[tuple[int, int, int, bytes]] = field(default_factory=list)
    """(stream, seq, flags, payload) per binary frame."""
    streams: dict[str, int] = field(default_factory=dict)
    audio: dict[str, bytearray] = field(default_factory=lambda: defaultdict(bytearray))
    order: list[tuple[str, str]] = field(default_factory=list)
    """('msg', type) / ('audio', context_id) in arrival order."""

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["type"] == kind]

    def context_of(self, stream: int) -> str:
        for cid, s in self.streams.items():
            if s == stream:
                return cid
        raise KeyError(stream)


class Client:
    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.got = Received()
        self._stream_owner: dict[int, str] = {}

    @classmethod
    async def connect(cls, url: str, **kwargs: Any) -> Client:
        ws = await websockets.connect(url, max_size=None, **kwargs)
        client = cls(ws)
        created = await client.next_message()
        assert created["type"] == "session.created", created
        return client

    async def send(self, **msg: Any) -> None:
        await self.ws.send(json.dumps(msg))

    async def next_message(self, timeout: float = 30) -> dict[str, Any]:
        """Receive until a JSON message arrives (recording audio on the way)."""
        while True:
            data = await asyncio.wait_for(self.ws.recv(), timeout)
            if isinstance(data, bytes):
                self._record_audio(data)
                continue
            msg = json.loads(data)
            self._record_message(msg)
            return msg

    async def next_any(self, timeout: float = 30) -> None:
        """Receive one frame of either kind and record it."""
        data = await asyncio.wait_for(self.ws.recv(), timeout)
        if isinstance(data, bytes):
            self._record_audio(data)
        else:
            self._record_message(json.loads(data))

    async def until_audio(self, context_id: str, timeout: float = 30) -> None:
        async with asyncio.timeout(timeout):
            while not self.got.audio[context_id]:
                await self.next_any(timeout)

    async def until(
        self, kind: str, context_id: str | None = None, timeout: float = 60
    ) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            while True:
                msg = await self.next_message(timeout)
                if msg["type"] == kind and (
                    context_id is None or msg.get("context_id") == context_id
                ):
                    return msg

    async def until_any(self, kinds: tuple[str, ...], timeout: float = 60) -> dict[str, Any]:
        """The next message of any of ``kinds``."""
        async with asyncio.timeout(timeout):
            while True:
                msg = await self.next_message(timeout)
                if msg["type"] in kinds:
                    return msg

    async def drain(self, seconds: float) -> None:
        """Keep receiving for ``seconds`` (to catch anything that should not come)."""
        try:
            async with asyncio.timeout(seconds):
                while True:
                    await self.next_message(seconds + 1)
        except (TimeoutError, websockets.ConnectionClosed):
            pass

    def _record_message(self, msg: dict[str, Any]) -> None:
        self.got.messages.append(msg)
        self.got.order.append(("msg", msg["type"]))
        if msg["type"] == "context.created":
            self.got.streams[msg["context_id"]] = msg["stream"]
            self._stream_owner[msg["stream"]] = msg["context_id"]

    def _record_audio(self, data: bytes) -> None:
        frame = unpack_audio(data)
        self.got.frames.append((frame.stream, frame.seq, frame.flags, bytes(frame.payload)))
        owner = self._stream_owner[frame.stream]
        self.got.audio[owner] += frame.payload
        self.got.order.append(("audio", owner))

    async def close(self) -> None:
        await self.ws.close()


async def speak_once(
    url: str,
    pieces: list[str],
    output_format: dict[str, Any],
    cid: str = "a",
    timeout: float = 60,
    **create: Any,
) -> tuple[bytes, dict[str, Any], Client]:
    """One context on a fresh socket: ``pieces`` appended one by one, then
    ``context.end``; its audio bytes, ``context.done`` and the client (no error seen)."""
    client = await Client.connect(url)
    await client.send(type="context.create", context_id=cid, output_format=output_format, **create)
    for piece in pieces:
        await client.send(type="text.append", context_id=cid, text=piece)
    await client.send(type="context.end", context_id=cid)
    done = await client.until("context.done", cid, timeout=timeout)
    await client.close()
    assert not client.got.of_type("error"), client.got.of_type("error")
    return bytes(client.got.audio[cid]), done, client
