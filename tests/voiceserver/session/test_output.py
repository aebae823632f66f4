"""ContextOutput: cheap stages run on the event loop, costly ones in the pool, and
a context's payloads come out in order either way."""

from __future__ import annotations

import asyncio
import io
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

import av
import numpy as np
import opuslib
import pytest
import soxr

from voiceserver.audio import AudioFormat, make_output
from voiceserver.audio.pipeline import make_file_output
from voiceserver.session.output import ContextOutput

RATE = 24000


class CountingPool(Executor):
    """A thread pool that counts what is handed to it."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=4)
        self.submitted = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1
        return self._pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._pool.shutdown(wait, cancel_futures=cancel_futures)


@pytest.fixture
def pool() -> Iterator[CountingPool]:
    pool = CountingPool()
    yield pool
    pool.shutdown()


def engine_chunks(seconds: float = 1.0, seed: int = 0) -> list[np.ndarray]:
    """Float32 chunks as the vocoder loop hands them out: small first, then doubling,
    with some overload and a NaN that must not reach the wire as garbage."""
    rng = np.random.default_rng(seed)
    x = (0.4 * rng.standard_normal(int(RATE * seconds))).astype(np.float32)
    x[100], x[2000], x[3000] = 1.7, -3.0, np.nan
    sizes, size, i = [], 1920, 0
    while i < len(x):
        sizes.append(min(size, len(x) - i))
        i, size = i + size, min(size * 2, 30720)
    return np.split(x, np.cumsum(sizes)[:-1])


def s16_oracle(x: np.ndarray) -> bytes:
    """The wire's s16le of float samples, written independently of the encoders."""
    x = np.where(np.isnan(x), 0.0, x)
    return np.rint(np.clip(x, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


async def feed_all(output: ContextOutput, chunks: list[np.ndarray]) -> list[bytes]:
    payloads: list[bytes] = []
    for i, chunk in enumerate(chunks):
        payloads += await output.feed(chunk, final=i == len(chunks) - 1)
    return payloads


async def test_pcm_at_the_model_rate_is_converted_in_place(pool: CountingPool) -> None:
    chunks = engine_chunks()
    for encoding in ("pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw"):
        stage = make_output(AudioFormat(encoding, RATE), RATE)
        assert stage.cheap, encoding
        await feed_all(ContextOutput(stage, pool), chunks)
    s16 = ContextOutput(make_output(AudioFormat("pcm_s16le", RATE), RATE), pool)
    f32 = ContextOutput(make_output(AudioFormat("pcm_f32le", RATE), RATE), pool)
    s16_bytes = b"".join(await feed_all(s16, chunks))
    f32_bytes = b"".join(await feed_all(f32, chunks))
    assert pool.submitted == 0  # never a thread hop
    whole = np.concatenate(chunks)
    assert s16_bytes == s16_oracle(whole)
    want_f32 = np.clip(np.where(np.isnan(whole), 0.0, whole), -1, 1).astype("<f4")
    assert f32_bytes == want_f32.tobytes()


async def test_http_pcm_and_wav_at_the_model_rate_are_cheap_too(pool: CountingPool) -> None:
    chunks = engine_chunks(0.5)
    pcm = ContextOutput(make_file_output("pcm", RATE, RATE), pool)
    data = b"".join(await feed_all(pcm, chunks))
    assert data == s16_oracle(np.concatenate(chunks))
    assert make_file_output("wav", RATE, RATE).cheap
    assert pool.submitted == 0


@pytest.mark.parametrize(
    "stage",
    [
        lambda: make_output(AudioFormat("pcm_s16le", 16000), RATE),  # soxr
        lambda: make_output(AudioFormat("opus", RATE), RATE),
        lambda: make_output(AudioFormat("opus", RATE, "ogg"), RATE),
        lambda: make_file_output("pcm", RATE, 48000),
        lambda: make_file_output("mp3", RATE, RATE),
        lambda: make_file_output("flac", RATE, RATE),
    ],
)
def test_resampling_and_codecs_are_not_cheap(stage: Any) -> None:
    assert not stage().cheap


async def test_raw_opus_runs_in_the_pool_and_decodes(pool: CountingPool) -> None:
    chunks = engine_chunks(1.0)
    chunks[-1] = np.nan_to_num(chunks[-1])
    output = ContextOutput(make_output(AudioFormat("opus", RATE, frame_ms=20), RATE), pool)
    packets = await feed_all(output, chunks)
    assert pool.submitted == len(chunks)
    assert len(packets) == 50  # 1 s in 20 ms packets, each its own payload
    decoder = opuslib.Decoder(RATE, 1)
    decoded = np.concatenate([np.frombuffer(decoder.decode_float(p, 480), "<f4") for p in packets])
    assert len(decoded) == RATE
    assert 0.2 < np.sqrt(np.mean(decoded**2)) < 0.6  # the noise, not silence


async def test_resampled_ogg_stream_decodes_to_the_input(pool: CountingPool) -> None:
    t = np.arange(RATE) / RATE
    tone = (0.4 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    output = ContextOutput(make_output(AudioFormat("opus", 16000, "ogg"), RATE), pool)
    data = b"".join(await feed_all(output, np.array_split(tone, 7)))
    assert pool.submitted == 7
    with av.open(io.BytesIO(data)) as container:
        decoded = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])
    assert len(decoded) == 48000  # Ogg/Opus decodes at 48 kHz: exactly 1 s
    spectrum = np.abs(np.fft.rfft(decoded * np.hanning(len(decoded))))
    assert np.fft.rfftfreq(len(decoded), 1 / 48000)[np.argmax(spectrum)] == pytest.approx(440, 2)


async def test_resampled_pcm_through_the_pool_equals_one_shot_soxr(pool: CountingPool) -> None:
    chunks = [np.nan_to_num(c) for c in engine_chunks(0.5)]
    output = ContextOutput(make_output(AudioFormat("pcm_f32le", 16000), RATE), pool)
    got = np.frombuffer(b"".join(await feed_all(output, chunks)), "<f4")
    want = np.clip(soxr.resample(np.concatenate(chunks), RATE, 16000), -1, 1)
    assert len(got) == len(want)
    assert np.abs(got - want).max() < 1e-4
    assert pool.submitted == len(chunks)


class MixedStage:
    """A stage that is cheap for some chunks and costly (slow, in the pool) for
    others, and notices being entered by two threads at once."""

    def __init__(self) -> None:
        self.calls = 0
        self.inside = 0
        self.overlapped = False
        self.closed_at_call: int | None = None
        self.finished = False
        self._guard = threading.Lock()

    @property
    def cheap(self) -> bool:
        return self.calls % 3 != 1  # every third call goes to the pool

    def feed(self, pcm: np.ndarray, *, drain: bool = False, final: bool = False) -> list[bytes]:
        with self._guard:
            self.inside += 1
            self.overlapped |= self.inside > 1
        try:
            if not self.cheap:
                time.sleep(0.02)  # long enough for the cheap ones behind to try to pass
            self.calls += 1
            self.finished = final
            return [pcm.tobytes()]
        finally:
            with self._guard:
                self.inside -= 1

    def close(self) -> None:
        with self._guard:
            self.overlapped |= self.inside > 0
        self.closed_at_call = self.calls
        self.finished = True


async def test_order_holds_across_inline_and_pooled_chunks(pool: CountingPool) -> None:
    stage = MixedStage()
    output = ContextOutput(stage, pool)
    chunks = [np.full(4, i, np.float32) for i in range(12)]
    # Every chunk asked for at once: a cheap one must still wait for a pooled one ahead.
    results = await asyncio.gather(*(output.feed(c) for c in chunks))
    assert [r[0] for r in results] == [c.tobytes() for c in chunks]
    assert pool.submitted == 4
    assert not stage.overlapped


async def test_close_waits_for_the_pooled_call_in_flight(pool: CountingPool) -> None:
    stage = MixedStage()
    stage.calls = 1  # the next call is a pooled, slow one
    output = ContextOutput(stage, pool)
    task = asyncio.create_task(output.feed(np.zeros(4, np.float32)))
    while pool.submitted == 0:
        await asyncio.sleep(0)
    output.close()
    output.close()
    assert stage.closed_at_call is None  # not while the stage works
    assert await task == [np.zeros(4, np.float32).tobytes()]
    await asyncio.sleep(0.01)
    assert stage.closed_at_call == 2 and not stage.overlapped
    assert await output.feed(np.zeros(4, np.float32)) == []  # nothing after close


async def test_a_cancelled_caller_does_not_let_the_next_call_overlap(pool: CountingPool) -> None:
    stage = MixedStage()
    stage.calls = 1
    output = ContextOutput(stage, pool)
    task = asyncio.create_task(output.feed(np.zeros(4, np.float32)))
    while pool.submitted == 0:
        await asyncio.sleep(0)
    await asyncio.sleep(0.001)
    task.cancel()  # the pooled call keeps running on its thread
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await output.feed(np.ones(4, np.float32)) == [np.ones(4, np.float32).tobytes()]
    assert not stage.overlapped and stage.calls == 3
