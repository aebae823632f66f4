"""The output stage behind every endpoint, over real sockets on the tiny model
(16 kHz): PCM at the model's rate is exactly the engine's float samples converted,
with no thread hop; resampled and Opus streams of the same socket still decode and
arrive in order."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import opuslib
import soxr

from tests.e2e.test_compat_vllm import VllmClient
from tests.serving import RunningServer
from tests.wsclient import Client
from voiceserver.engine.messages import AudioChunk, EngineEvent

RATE = 16000
TEXTS = {
    "native": "The quick brown fox jumps over the lazy dog.",
    "opus": "Pack my box with five dozen liquor jugs!",
    "resampled": "How vexingly quick daft zebras jump.",
}
FORMATS: dict[str, dict[str, Any]] = {
    "native": {"encoding": "pcm_s16le", "sample_rate": RATE},  # in place
    "opus": {"encoding": "opus", "sample_rate": RATE, "frame_ms": 20},  # pool
    "resampled": {"encoding": "pcm_f32le", "sample_rate": 24000},  # pool
}


def s16_oracle(x: np.ndarray) -> bytes:
    """s16le of the engine's floats, written independently of the server's encoders."""
    return np.rint(np.clip(np.nan_to_num(x), -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


@contextlib.contextmanager
def engine_audio(server: RunningServer) -> Iterator[list[list[np.ndarray]]]:
    """The float32 chunks the engine hands the front end, one list per context
    opened meanwhile, in the order the contexts were opened."""
    client = server.runtime.client
    opened: list[list[np.ndarray]] = []
    original = client.open

    def open_teed(
        params: Any, on_event: Callable[[EngineEvent], None], *args: Any, **kwargs: Any
    ) -> Any:
        chunks: list[np.ndarray] = []
        opened.append(chunks)

        def tee(event: EngineEvent) -> None:
            if isinstance(event, AudioChunk):
                chunks.append(event.pcm.copy())
            on_event(event)

        return original(params, tee, *args, **kwargs)

    client.open = open_teed
    try:
        yield opened
    finally:
        del client.open


@contextlib.contextmanager
def pool_calls(server: RunningServer) -> Iterator[list[int]]:
    """How many calls the encode pool is handed meanwhile (a list of one count)."""
    pool = server.runtime.encode_pool
    count = [0]
    original = pool.submit

    def submit(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return original(*args, **kwargs)

    pool.submit = submit
    try:
        yield count
    finally:
        del pool.submit


def words(text: str) -> list[str]:
    parts = text.split(" ")
    return [parts[0]] + [" " + p for p in parts[1:]]


async def test_native_rate_pcm_is_the_engine_audio_converted_in_place(
    tiny_server: RunningServer,
) -> None:
    with engine_audio(tiny_server) as opened, pool_calls(tiny_server) as hops:
        client = await Client.connect(tiny_server.ws)
        await client.send(type="context.create", context_id="c", output_format=FORMATS["native"])
        for word in words(TEXTS["native"]):
            await client.send(type="text.append", context_id="c", text=word)
        await client.send(type="context.flush", context_id="c")
        await client.send(type="text.append", context_id="c", text=" And more.")
        await client.send(type="context.end", context_id="c")
        await client.until("context.done", "c")
        await client.close()
    [chunks] = opened
    assert len(chunks) > 2
    assert bytes(client.got.audio["c"]) == s16_oracle(np.concatenate(chunks))
    assert hops == [0]


async def test_inline_and_pooled_contexts_of_one_socket_stay_in_order(
    tiny_server: RunningServer,
) -> None:
    client = await Client.connect(tiny_server.ws)
    with engine_audio(tiny_server) as opened:
        for cid, fmt in FORMATS.items():
            await client.send(type="context.create", context_id=cid, output_format=fmt)
            await client.until("context.created", cid)
        # Interleaved text, so the three streams' chunks interleave on the socket.
        pieces = {cid: words(text) for cid, text in TEXTS.items()}
        for i in range(max(len(p) for p in pieces.values())):
            for cid, p in pieces.items():
                if i < len(p):
                    await client.send(type="text.append", context_id=cid, text=p[i])
        for cid in FORMATS:
            await client.send(type="context.end", context_id=cid)
        while len(client.got.of_type("context.done")) < len(FORMATS):
            await client.until("context.done")
    await client.close()
    engine = {cid: np.concatenate(chunks) for cid, chunks in zip(FORMATS, opened, strict=True)}

    # Per stream: seq counts 0, 1, 2... in arrival order; only the last frame ends it.
    by_stream: dict[str, list[tuple[int, int, bytes]]] = {cid: [] for cid in FORMATS}
    for stream, seq, flags, payload in client.got.frames:
        by_stream[client.got.context_of(stream)].append((seq, flags, payload))
    assert len({client.got.streams[cid] for cid in FORMATS}) == len(FORMATS)
    for cid, frames in by_stream.items():
        assert [seq for seq, _, _ in frames] == list(range(len(frames))), cid
        assert frames[-1][1] & 2 and not any(flags & 2 for _, flags, _ in frames[:-1]), cid
    # Chunks of different contexts did interleave on the wire.
    owners = [owner for kind, owner in client.got.order if kind == "audio"]
    assert sum(a != b for a, b in zip(owners, owners[1:], strict=False)) >= 3

    assert bytes(client.got.audio["native"]) == s16_oracle(engine["native"])

    resampled = np.frombuffer(bytes(client.got.audio["resampled"]), "<f4")
    want = np.clip(soxr.resample(engine["resampled"], RATE, 24000), -1.0, 1.0)
    assert len(resampled) == len(want)
    assert np.abs(resampled - want).max() < 1e-3

    # libopus is deterministic: the wire's packets are those of one encoder fed the
    # engine's audio in order, 20 ms at a time (the last frame padded with silence).
    packets = [payload for _, _, payload in by_stream["opus"] if payload]
    frame = RATE // 50
    reference = np.clip(engine["opus"], -1.0, 1.0)
    padded = np.zeros(-(-len(reference) // frame) * frame, np.float32)
    padded[: len(reference)] = reference
    encoder = opuslib.Encoder(RATE, 1, opuslib.APPLICATION_AUDIO)
    encoder.bitrate = 24000  # the format's default at 16 kHz
    frames = padded.reshape(-1, frame)
    assert packets == [bytes(encoder.encode_float(f.tobytes(), frame)) for f in frames]
    decoder = opuslib.Decoder(RATE, 1)
    decoded = [np.frombuffer(decoder.decode_float(p, frame), "<f4") for p in packets]
    assert sum(len(d) for d in decoded) == len(padded)


async def test_http_pcm_at_the_model_rate_is_the_engine_audio(
    tiny_server: RunningServer,
) -> None:
    body = {"input": TEXTS["native"], "response_format": "pcm", "sample_rate": RATE}
    with engine_audio(tiny_server) as opened:
        async with httpx.AsyncClient(base_url=tiny_server.http, timeout=30) as http:
            response = await http.post("/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    [chunks] = opened
    assert response.content == s16_oracle(np.concatenate(chunks))


async def test_compat_streamed_pcm_is_the_engine_audio(tiny_server: RunningServer) -> None:
    with engine_audio(tiny_server) as opened:
        client = await VllmClient.connect(tiny_server)
        await client.send(
            type="session.config",
            response_format="pcm",
            stream_audio=True,
            split_granularity="sentence",
            sample_rate=RATE,
        )
        utterance = await client.speak([TEXTS["native"], " ", TEXTS["opus"]])
        await client.close()
    assert len(utterance.sentences) == len(opened) == 2
    for sentence, chunks in zip(utterance.sentences, opened, strict=True):
        assert sentence.start["sample_rate"] == RATE
        assert sentence.data == s16_oracle(np.concatenate(chunks))
