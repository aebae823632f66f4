"""VoiceClient against the real server on loopback, with the tiny model.

The tiny model speaks one 20 ms frame per byte of text plus 3 tail frames, so audio
lengths are exact; the default output is 24 kHz s16le (960 bytes per frame).
"""

from __future__ import annotations

import asyncio
import socket
import time

import numpy as np
import pytest
from voiceclient import (
    AudioChunk,
    TimedWords,
    VoiceClient,
    VoiceConnectionError,
    VoiceContext,
    VoiceServerError,
    synthesize,
)

from protocol.messages import ContextCancelled, ContextDone, OutputFormat, WarningMessage
from tests.clients.conftest import TEST_LIMITS
from tests.serving import RunningServer, run_server
from voiceserver.config import ServerConfig, load_model_config

BYTES_PER_FRAME = 480 * 2
TEXT = "Hello there, how are you today?"


def expected_bytes(text: str) -> int:
    return (len(text.encode()) + 3) * BYTES_PER_FRAME


def words(text: str) -> list[str]:
    parts = text.split(" ")
    return [parts[0]] + [" " + p for p in parts[1:]]


def assert_same_audio(a: bytes, b: bytes) -> None:
    """Equal s16 audio up to 2 LSB (batched float math); another voice differs by far more."""
    assert len(a) == len(b)
    x, y = np.frombuffer(a, np.int16).astype(int), np.frombuffer(b, np.int16).astype(int)
    assert np.abs(x - y).max(initial=0) <= 2


async def collect(ctx: VoiceContext) -> list[AudioChunk]:
    return [chunk async for chunk in ctx.audio()]


async def test_context_streams_words_and_finishes(tiny_server: RunningServer) -> None:
    async with VoiceClient.connect(tiny_server.ws) as vc:
        assert vc.session_id and vc.limits.max_contexts == TEST_LIMITS.max_contexts
        ctx = await vc.create_context()
        assert ctx.stream is not None
        reader = asyncio.create_task(collect(ctx))
        for word in words(TEXT):
            await ctx.append(word)
        await ctx.end()
        chunks = await reader
        done = await ctx.done()

    assert isinstance(done, ContextDone) and done.context_id == ctx.context_id
    assert done.usage.chars == len(TEXT)
    assert done.audio_ms == (len(TEXT) + 3) * 20
    assert sum(len(c.payload) for c in chunks) == expected_bytes(TEXT)
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert chunks[-1].context_end and not any(c.context_end for c in chunks[:-1])
    times = [c.received_at for c in chunks]
    assert times == sorted(times) and times[-1] <= time.monotonic()


async def test_auto_ids_are_distinct_and_explicit_id_is_kept(tiny_server: RunningServer) -> None:
    async with VoiceClient.connect(tiny_server.ws) as vc:
        a = await vc.create_context()
        b = await vc.create_context()
        c = await vc.create_context("my.context-1")
        assert len({a.context_id, b.context_id, c.context_id}) == 3
        assert c.context_id == "my.context-1"
        assert len({a.stream, b.stream, c.stream}) == 3
        with pytest.raises(VoiceServerError) as exists:
            await vc.create_context("my.context-1")
        assert exists.value.code == "context_exists"


async def test_done_first_then_audio_still_complete(tiny_server: RunningServer) -> None:
    async with VoiceClient.connect(tiny_server.ws) as vc:
        ctx = await vc.create_context()
        await ctx.append(TEXT)
        await ctx.end()
        await ctx.done()
        audio = await ctx.read_all()
        assert len(audio) == expected_bytes(TEXT)
        assert await ctx.read_all() == b""  # a second read ends at once


async def test_flush_waits_for_its_audio(tiny_server: RunningServer) -> None:
    text = "Half a sentence"
    async with VoiceClient.connect(tiny_server.ws) as vc:
        ctx = await vc.create_context()
        await ctx.append(text)
        flush_id = await ctx.flush("first")
        assert flush_id == "first"
        flushed = await ctx.flushed("first")
        assert flushed.audio_ms == len(text) * 20
        before_end = []
        while not ctx._queue.empty():
            before_end.append(ctx._queue.get_nowait())
        assert sum(len(c.payload) for c in before_end) == len(text) * BYTES_PER_FRAME
        assert before_end[-1].flush_end
        # text.append(flush=True) flushes too; that flush has no id.
        await ctx.append(" and more", flush=True)
        assert (await ctx.flushed(None)).audio_ms == len(text + " and more") * 20
        auto_id = await ctx.flush()
        assert auto_id and auto_id != "first"
        await ctx.end()
        await ctx.done()
        assert set(ctx.flushes) >= {"first", None}


async def test_cancel_stops_audio_and_frees_the_context(tiny_server: RunningServer) -> None:
    long_text = "word " * 350
    async with VoiceClient.connect(tiny_server.ws) as vc:
        ctx = await vc.create_context("long")
        await ctx.append(long_text)
        await ctx.end()
        first = await anext(aiter(ctx.audio()))
        assert first.seq == 0
        cancelled = await ctx.cancel(played_ms=20)
        assert isinstance(cancelled, ContextCancelled)
        assert cancelled.last_seq is not None and cancelled.last_seq >= 0
        assert 0 < cancelled.audio_sent_ms < (len(long_text) + 3) * 20
        # Queued audio was dropped: the iterator ends without more chunks.
        assert await collect(ctx) == []
        assert await ctx.done() == cancelled
        assert not vc.server_knows("long")
        # The same id can be opened again, and the session still works.
        again = await vc.create_context("long")
        await again.append("ok")
        await again.end()
        assert len(await again.read_all()) == expected_bytes("ok")


async def test_cancel_after_done_returns_none(tiny_server: RunningServer) -> None:
    async with VoiceClient.connect(tiny_server.ws) as vc:
        ctx = await vc.create_context()
        await ctx.append("hi")
        await ctx.end()
        await ctx.done()
        assert await ctx.cancel() is None


async def test_rejected_context_raises_from_create(tiny_server: RunningServer) -> None:
    async with VoiceClient.connect(tiny_server.ws) as vc:
        with pytest.raises(VoiceServerError) as rejected:
            await vc.create_context(voice="nobody")
        assert rejected.value.code == "unknown_voice"
        assert rejected.value.param == "voice"
        assert rejected.value.fatal is False
        # The session survives.
        assert len(await vc.synthesize("fine")) == expected_bytes("fine")


async def test_rejected_context_without_wait_raises_from_audio_and_done(
    tiny_server: RunningServer,
) -> None:
    async with VoiceClient.connect(tiny_server.ws) as vc:
        ctx = await vc.create_context(voice="nobody", wait=False)
        with pytest.raises(VoiceServerError) as from_audio:
            await collect(ctx)
        assert from_audio.value.code == "unknown_voice"
        with pytest.raises(VoiceServerError):
            await ctx.done()
        with pytest.raises(VoiceServerError):
            await ctx.append("more")


async def test_error_mid_context_fails_it_and_cancels_it_on_the_server(
    tiny_server: RunningServer,
) -> None:
    async with VoiceClient.connect(tiny_server.ws) as vc:
        bystander = await vc.create_context()
        await bystander.append(TEXT)
        ctx = await vc.create_context("big")
        await ctx.append("x" * (TEST_LIMITS.max_text_chars + 1))
        with pytest.raises(VoiceServerError) as too_long:
            await ctx.done()
        assert too_long.value.code == "text_too_long"
        assert too_long.value.context_id == "big"
        # The client gave the context up; the server forgets it (its slot is free).
        async with asyncio.timeout(5):
            while vc.server_knows("big"):
                await asyncio.sleep(0.01)
        # Other contexts of the session are untouched.
        await bystander.end()
        assert len(await bystander.read_all()) == expected_bytes(TEXT)


async def test_concurrent_contexts_on_one_connection_never_mix(
    tiny_server: RunningServer,
) -> None:
    texts = {
        "a": ("The quick brown fox jumps over the lazy dog.", "tiny-a"),
        "b": ("Pack my box with five dozen liquor jugs!", "tiny-b"),
        "c": ("How vexingly quick daft zebras jump.", "tiny-a"),
    }
    async with VoiceClient.connect(tiny_server.ws) as vc:
        contexts = {cid: await vc.create_context(cid, voice=v) for cid, (_, v) in texts.items()}
        readers = {cid: asyncio.create_task(ctx.read_all()) for cid, ctx in contexts.items()}
        pieces = {cid: words(text) for cid, (text, _) in texts.items()}
        for i in range(max(len(p) for p in pieces.values())):
            for cid, ctx in contexts.items():
                if i < len(pieces[cid]):
                    await ctx.append(pieces[cid][i])
        for ctx in contexts.values():
            await ctx.end()
        together = {cid: await reader for cid, reader in readers.items()}
        for cid, (text, voice) in texts.items():
            alone = await vc.synthesize(text, voice=voice)
            assert_same_audio(together[cid], alone)
    assert together["a"][:4000] != together["b"][:4000]


async def test_concurrent_connections_and_module_synthesize(tiny_server: RunningServer) -> None:
    texts = ["One two three.", "Four five six seven.", "Eight!"]
    audios = await asyncio.gather(*(synthesize(tiny_server.ws, t) for t in texts))
    assert [len(a) for a in audios] == [expected_bytes(t) for t in texts]


async def test_output_format_as_mapping_or_struct(tiny_server: RunningServer) -> None:
    async with VoiceClient.connect(tiny_server.ws) as vc:
        as_dict = await vc.synthesize("abc", output_format={"sample_rate": 16000})
        as_struct = await vc.synthesize("abc", output_format=OutputFormat(sample_rate=16000))
    assert len(as_dict) == (3 + 3) * 320 * 2
    assert as_dict == as_struct


async def test_session_defaults_are_sent_on_connect(tiny_server: RunningServer) -> None:
    async with VoiceClient.connect(tiny_server.ws, voice="tiny-b") as vc:
        assert vc.settings.voice == "tiny-b"
        default_voice = await vc.synthesize(TEXT)
        explicit = await vc.synthesize(TEXT, voice="tiny-b")
        other = await vc.synthesize(TEXT, voice="tiny-a")
    assert_same_audio(default_voice, explicit)
    assert default_voice != other


async def test_base64_transport_gives_the_same_audio(tiny_server: RunningServer) -> None:
    async with VoiceClient.connect(tiny_server.ws, audio_transport="base64") as vc:
        ctx = await vc.create_context()
        await ctx.append(TEXT)
        await ctx.end()
        chunks = await collect(ctx)
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    binary = await synthesize(tiny_server.ws, TEXT)
    assert_same_audio(b"".join(c.payload for c in chunks), binary)


async def test_fatal_error_closes_and_fails_pending_contexts(tiny_server: RunningServer) -> None:
    vc = await VoiceClient.connect(tiny_server.ws)
    ctx = await vc.create_context()
    await ctx.append("x" * (TEST_LIMITS.max_message_bytes + 10))
    with pytest.raises(VoiceConnectionError) as lost:
        await ctx.done()
    assert lost.value.close_code == 1009
    assert "too big" in lost.value.message.lower() or "message_too_big" in lost.value.message
    assert vc.closed
    with pytest.raises(VoiceConnectionError):
        await vc.create_context()
    await vc.close()


async def test_client_close_fails_open_contexts(tiny_server: RunningServer) -> None:
    vc = await VoiceClient.connect(tiny_server.ws)
    ctx = await vc.create_context()
    await ctx.append("still open")
    await vc.close()
    with pytest.raises(VoiceConnectionError) as lost:
        await ctx.done()
    assert lost.value.code == "connection_closed"


async def test_close_with_drain_finishes_open_contexts(tiny_server: RunningServer) -> None:
    vc = await VoiceClient.connect(tiny_server.ws)
    ctx = await vc.create_context()
    await ctx.append(TEXT)
    await vc.close(drain=True)
    assert isinstance(await ctx.done(), ContextDone)
    assert len(await ctx.read_all()) == expected_bytes(TEXT)


async def test_api_key_is_sent_and_401_is_reported() -> None:
    with run_server(load_model_config("tiny"), ServerConfig(api_keys=("sekrit",))) as server:
        with pytest.raises(VoiceConnectionError) as denied:
            await VoiceClient.connect(server.ws)
        assert denied.value.code == "unauthorized"
        async with VoiceClient.connect(server.ws, api_key="sekrit") as vc:
            assert len(await vc.synthesize("ok")) == expected_bytes("ok")


async def test_connect_to_nothing_is_connect_failed() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(VoiceConnectionError) as failed:
        await VoiceClient.connect(f"ws://127.0.0.1:{port}/v1/audio/speech/ws")
    assert failed.value.code == "connect_failed"


async def test_events_interleave_word_timestamps_with_the_audio(tiny_server: RunningServer) -> None:
    async with VoiceClient.connect(tiny_server.ws, timestamps="word") as vc:
        ctx = await vc.create_context()
        await ctx.append(TEXT)
        await ctx.end()
        events = [event async for event in ctx.events()]
    chunks = [e for e in events if isinstance(e, AudioChunk)]
    assert sum(len(c.payload) for c in chunks) == expected_bytes(TEXT)
    batches = [e for e in events if isinstance(e, TimedWords)]
    warned = [e for e in events if isinstance(e, WarningMessage)]
    # A model that aligns words sends them (each batch before the audio it describes);
    # one that cannot says so in a warning, once.
    assert bool(batches) != bool(warned)
    assert [w for batch in batches for w in batch] == ctx.timestamps
    assert ctx.warnings == warned
    if batches:
        assert [w.text for w in ctx.timestamps] == TEXT.split()
        assert [TEXT[w.char_start : w.char_end] for w in ctx.timestamps] == TEXT.split()
        received_ms = 0
        for event in events:
            if isinstance(event, AudioChunk):
                received_ms += len(event.payload) // BYTES_PER_FRAME * 20
            elif isinstance(event, TimedWords):
                assert all(w.start_ms >= received_ms - 20 * 16 for w in event)


async def test_audio_skips_timestamps(tiny_server: RunningServer) -> None:
    async with VoiceClient.connect(tiny_server.ws, timestamps="word") as vc:
        ctx = await vc.create_context()
        await ctx.append(TEXT)
        await ctx.end()
        chunks = await collect(ctx)
    assert all(isinstance(c, AudioChunk) for c in chunks)
    assert sum(len(c.payload) for c in chunks) == expected_bytes(TEXT)
