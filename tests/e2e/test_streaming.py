"""Streaming behaviour over a real socket, on the tiny model (deterministic, fast)."""

from __future__ import annotations

import asyncio
import time

import httpx
import numpy as np

from tests.serving import RunningServer
from tests.wsclient import Client
from voiceserver.engine.remote import RemoteRunner

TEXT = "Hello there, how are you today? I hope the weather is fine."
# tiny: one 20 ms frame per byte, plus 3 tail frames; default output is 24 kHz s16le.
BYTES_PER_FRAME = 480 * 2


def assert_same_audio(a: bytes, b: bytes) -> None:
    """Equal s16 audio up to 2 LSB (float reassociation in batched matmuls); mixed
    or misplaced audio differs by thousands."""
    assert len(a) == len(b)
    x, y = np.frombuffer(a, np.int16).astype(int), np.frombuffer(b, np.int16).astype(int)
    assert np.abs(x - y).max(initial=0) <= 2


def words(text: str) -> list[str]:
    parts = text.split(" ")
    return [parts[0]] + [" " + p for p in parts[1:]]


async def synthesize_alone(server: RunningServer, text: str, voice: str = "tiny-a") -> bytes:
    client = await Client.connect(server.ws)
    await client.send(type="context.create", context_id="solo", voice=voice)
    await client.send(type="text.append", context_id="solo", text=text)
    await client.send(type="context.end", context_id="solo")
    await client.until("context.done", "solo")
    await client.close()
    return bytes(client.got.audio["solo"])


async def test_word_by_word_audio_arrives_before_end(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    await client.send(type="context.create", context_id="c1")
    for word in words(TEXT):
        await client.send(type="text.append", context_id="c1", text=word)
        await asyncio.sleep(0.01)
    # No context.end yet: audio must already be flowing.
    await client.until_audio("c1", timeout=10)
    await client.send(type="context.end", context_id="c1")
    done = await client.until("context.done", "c1")
    await client.close()

    audio = bytes(client.got.audio["c1"])
    assert len(audio) == (len(TEXT.encode()) + 3) * BYTES_PER_FRAME
    assert done["usage"]["chars"] == len(TEXT)
    assert done["audio_ms"] == (len(TEXT.encode()) + 3) * 20
    # The last frame carries the context-end flag, seq counts from 0 without gaps.
    seqs = [seq for _, seq, _, _ in client.got.frames]
    assert seqs == list(range(len(seqs)))
    assert client.got.frames[-1][2] & 2
    assert all(not flags & 2 for _, _, flags, _ in client.got.frames[:-1])
    # Streaming equals a one-shot request of the same text.
    assert_same_audio(audio, await synthesize_alone(tiny_server, TEXT))


async def test_two_contexts_one_socket_never_mix(tiny_server: RunningServer) -> None:
    texts = {
        "a": "The quick brown fox jumps over the lazy dog.",
        "b": "Pack my box with five dozen liquor jugs!",
    }
    voices = {"a": "tiny-a", "b": "tiny-b"}
    client = await Client.connect(tiny_server.ws)
    for cid in texts:
        await client.send(type="context.create", context_id=cid, voice=voices[cid])
    for wa, wb in zip(words(texts["a"]), words(texts["b"]), strict=False):
        await client.send(type="text.append", context_id="a", text=wa)
        await client.send(type="text.append", context_id="b", text=wb)
    # zip stopped at the shorter text; send the rest
    na, nb = len(words(texts["a"])), len(words(texts["b"]))
    for w in words(texts["a"])[nb:]:
        await client.send(type="text.append", context_id="a", text=w)
    for w in words(texts["b"])[na:]:
        await client.send(type="text.append", context_id="b", text=w)
    for cid in texts:
        await client.send(type="context.end", context_id=cid)
    while len(client.got.of_type("context.done")) < 2:
        await client.until("context.done")
    await client.close()
    assert client.got.streams["a"] != client.got.streams["b"]
    for cid, text in texts.items():
        alone = await synthesize_alone(tiny_server, text, voices[cid])
        assert_same_audio(bytes(client.got.audio[cid]), alone)


async def test_two_sockets_at_once_never_mix(tiny_server: RunningServer) -> None:
    texts = ["One two three four five six seven.", "Eight nine ten eleven twelve!"]

    async def run(text: str, voice: str) -> bytes:
        return await synthesize_alone(tiny_server, text, voice)

    together = await asyncio.gather(run(texts[0], "tiny-a"), run(texts[1], "tiny-b"))
    assert together[0] != together[1]
    assert_same_audio(together[0], await run(texts[0], "tiny-a"))
    assert_same_audio(together[1], await run(texts[1], "tiny-b"))


async def test_cancel_mid_utterance_stops_audio(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    await client.send(type="context.create", context_id="long")
    await client.send(type="text.append", context_id="long", text="word " * 350)
    await client.send(type="context.end", context_id="long")
    await client.until_audio("long", timeout=10)
    await client.send(type="context.cancel", context_id="long")
    cancelled = await client.until("context.cancelled", "long")
    position = len(client.got.order)
    await client.drain(1.0)
    later = [entry for entry in client.got.order[position:] if entry == ("audio", "long")]
    assert later == []
    assert "context.done" not in [m["type"] for m in client.got.messages]
    sent_frames = [f for f in client.got.frames if f[0] == client.got.streams["long"]]
    assert cancelled["last_seq"] == sent_frames[-1][1]
    full_ms = (len(("word " * 350).encode()) + 3) * 20
    assert 0 < cancelled["audio_sent_ms"] < full_ms
    # The slot is free at once: a new context on the same socket works.
    await client.send(type="context.create", context_id="next")
    await client.send(type="text.append", context_id="next", text="ok")
    await client.send(type="context.end", context_id="next")
    await client.until("context.done", "next")
    await client.close()


async def test_socket_close_frees_engine_slots(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    for i in range(3):
        await client.send(type="context.create", context_id=f"c{i}")
        await client.send(type="text.append", context_id=f"c{i}", text="lorem ipsum " * 150)
    for i in range(3):
        await client.until_audio(f"c{i}", timeout=10)
    engine = tiny_server.runtime.engine
    # An engine process reports its figures every few milliseconds: wait for the report.
    deadline = time.monotonic() + 2
    while engine.snapshot().used_slots < 3 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    stats = engine.snapshot()
    assert stats.active_contexts == 3 and stats.used_slots == 3
    await client.ws.close()
    deadline = time.monotonic() + 5
    async with httpx.AsyncClient() as http:
        while True:
            health = (await http.get(f"{tiny_server.http}/health")).json()
            if health["engine"]["active_slots"] == 0 and health["engine"]["active_contexts"] == 0:
                break
            assert time.monotonic() < deadline, health
            await asyncio.sleep(0.05)
    runner = tiny_server.runtime.model.runner
    if not isinstance(runner, RemoteRunner):  # the model itself is here to ask
        assert runner.open_slots == 0


async def test_flush_acknowledged_after_its_audio(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    await client.send(type="context.create", context_id="f")
    await client.send(type="text.append", context_id="f", text="Half a sentence")
    await client.send(type="context.flush", context_id="f", flush_id="first")
    flushed = await client.until("context.flushed", "f")
    assert flushed["flush_id"] == "first"
    audio = np.frombuffer(bytes(client.got.audio["f"]), np.int16)
    assert len(audio) == len("Half a sentence") * 480
    assert flushed["audio_ms"] == len("Half a sentence") * 20
    assert client.got.frames[-1][2] & 1  # last frame of the flush
    await client.send(type="context.end", context_id="f")
    await client.until("context.done", "f")
    await client.close()
