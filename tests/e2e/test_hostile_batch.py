"""POST /v1/audio/speech/batch as an amplifier, against ``voiceserver serve`` in its own
process (tiny random Qwen3-TTS Base checkpoint, 8 engine slots).

Before: a top-level ``ref_audio`` naming a local file was read and decoded once per
item (three 727-byte batches of 32 items naming a 15 MB file: +413 MB in 1.8 s, and
88 of the 96 items failed "the engine is at capacity"); a batch's text had no total
bound (32 items of 100k characters) nor its output (every item's whole file held
until the last finished, then one JSON body holding them all, base64). Now a shared
reference is read and cloned once per batch and every item speaks with the cloned
voice (as a stored voice does); items wait for room within the client's share of the
engine; a batch holds at most ``Limits.max_batch_text_chars`` characters of input in
all (else 400 ``text_too_long``) and makes at most ``Limits.max_batch_audio_bytes`` of
audio (items past it fail alone); the answer streams, item by item in index order.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
import wave
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from bench.spawn import SpawnedServer, spawn_server
from tests.e2e.proc import rss_mb
from tests.e2e.test_voices import REF_B64
from voiceserver.config import Limits

SHORT = {"max_new_tokens": 3, "temperature": 0}
ITEMS = 32
BATCHES = 3
REF_SECONDS = 40.0
GROWTH_BOUND_MB = 250
"""RSS growth allowed while three batches share one 5.8 MB reference (before: +730 MB)."""
AUDIO_CAP = 300_000


def big_wav(seconds: float, rate: int = 48_000, channels: int = 4) -> bytes:
    """A valid reference just under the 16 MiB file cap: 40 s of 4-channel 48 kHz."""
    t = np.arange(int(seconds * rate)) / rate
    tone = 0.3 * np.sin(2 * np.pi * 180 * t) + 0.05 * np.random.default_rng(1).standard_normal(
        t.size
    )
    pcm = (np.stack([tone] * channels, axis=1) * 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return out.getvalue()


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("media")
    (folder / "big.wav").write_bytes(big_wav(REF_SECONDS))
    return folder


def spawn(base_checkpoint: Path, tmp: Path, *args: str) -> Any:
    args = ("--voices-dir", str(tmp / "voices"), *args)
    return spawn_server(None, model=base_checkpoint, options=("max_frames=24",), args=args)


@pytest.fixture(scope="module")
def server(
    base_checkpoint: Path, media: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SpawnedServer]:
    tmp = tmp_path_factory.mktemp("batch")
    with spawn(base_checkpoint, tmp, "--allowed-local-media-path", str(media)) as running:
        yield running


class PeakRss:
    """Samples a process's RSS every 20 ms while it runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.base = self.peak = rss_mb(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            time.sleep(0.02)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def growth(self) -> float:
        return self.peak - self.base


def post_batch(server: SpawnedServer, body: dict[str, Any], timeout: float = 120) -> httpx.Response:
    return httpx.post(server.http + "/v1/audio/speech/batch", json=body, timeout=timeout)


def test_a_shared_local_reference_is_read_and_cloned_once(
    server: SpawnedServer, media: Path
) -> None:
    assert server.pid is not None
    body = {
        "ref_audio": str(media / "big.wav"),
        "x_vector_only_mode": True,
        "response_format": "pcm",
        "items": [{"input": "Hi."}] * ITEMS,
        **SHORT,
    }
    assert len(json.dumps(body)) < 1000
    # Warm up: the first clone loads what it needs once.
    warm = post_batch(server, {**body, "items": [{"input": "Hi."}]})
    assert warm.status_code == 200, warm.text
    time.sleep(0.5)
    started = time.monotonic()
    with PeakRss(server.pid) as rss, ThreadPoolExecutor(BATCHES) as pool:
        replies = list(pool.map(lambda _: post_batch(server, body), range(BATCHES)))
    seconds = time.monotonic() - started
    for reply in replies:
        assert reply.status_code == 200, reply.text[:300]
        out = reply.json()
        assert out["succeeded"] == ITEMS, [r["error"] for r in out["results"] if r["error"]][:3]
    print(f"3 batches: +{rss.growth:.0f} MB RSS (peak {rss.peak:.0f} MB) in {seconds:.1f} s")
    assert rss.growth < GROWTH_BOUND_MB, rss.growth


def test_a_batch_holds_at_most_max_batch_text_chars_in_all(server: SpawnedServer) -> None:
    limit = Limits().max_batch_text_chars
    per_item = limit // 16
    body = {
        "ref_audio": REF_B64,
        "x_vector_only_mode": True,
        "response_format": "wav",
        "sample_rate": 48000,
        "items": [{"input": "a" * per_item}] * ITEMS,
        **SHORT,
    }
    started = time.monotonic()
    reply = post_batch(server, body, timeout=30)
    assert reply.status_code == 400, reply.text[:300]
    error = reply.json()["error"]
    assert (error["code"], error["param"]) == ("text_too_long", "items")
    assert str(limit) in error["message"]
    assert time.monotonic() - started < 5


def test_items_past_the_audio_bound_fail_alone_and_the_answer_streams(
    base_checkpoint: Path, tmp_path: Path
) -> None:
    items = 8
    with spawn(
        base_checkpoint, tmp_path, "--limit", f"max_batch_audio_bytes={AUDIO_CAP}"
    ) as running:
        body = {
            "ref_audio": REF_B64,
            "x_vector_only_mode": True,
            "response_format": "wav",
            "sample_rate": 48000,
            "items": [{"input": f"Item number {i} says hello there."} for i in range(items)],
            "temperature": 0,
        }
        with (
            httpx.Client(timeout=120) as http,
            http.stream("POST", running.http + "/v1/audio/speech/batch", json=body) as reply,
        ):
            assert reply.status_code == 200
            assert reply.headers["content-type"].startswith("application/json")
            assert "content-length" not in reply.headers  # streamed, item by item
            data = b"".join(reply.iter_bytes())
        out = json.loads(data)
        assert set(out) == {"id", "results", "total", "succeeded", "failed"}
        assert [r["index"] for r in out["results"]] == list(range(items))
        assert out["total"] == items and out["succeeded"] + out["failed"] == items
        good = [r for r in out["results"] if r["status"] == "success"]
        bad = [r for r in out["results"] if r["status"] == "error"]
        assert good and bad, [(r["status"], r.get("code"), r.get("error")) for r in out["results"]]
        made = sum(len(base64.b64decode(r["audio_data"])) for r in good)
        assert made <= AUDIO_CAP + 44 * len(good)  # 16-bit samples, plus each WAV header
        for result in bad:
            assert result["code"] == "message_too_big", result
            assert "max_batch_audio_bytes" in result["error"]
            assert result["audio_data"] is None


def test_a_big_batch_leaves_room_for_a_bystander(base_checkpoint: Path, tmp_path: Path) -> None:
    """Before: the batch's items took every engine slot they could (the rest failed
    'the engine is at capacity') and a bystander got 503 meanwhile. Now the batch runs
    within its client's share and its other items wait their turn."""
    # Slots, not measured load, are what this is about: on a busy 2-core machine the
    # load the batch makes could refuse the bystander (503) whatever its share.
    keys = ("--api-key", "batcher", "--api-key", "bystander", "--engine", "admission_load=0")
    with spawn(base_checkpoint, tmp_path, *keys) as running, ThreadPoolExecutor(1) as pool:
        body = {
            "ref_audio": REF_B64,
            "x_vector_only_mode": True,
            "response_format": "pcm",
            "items": [{"input": "A sentence long enough to keep a slot busy a while."}] * ITEMS,
            "temperature": 0,
        }
        batch = pool.submit(
            httpx.post,
            running.http + "/v1/audio/speech/batch",
            json=body,
            headers={"authorization": "Bearer batcher"},
            timeout=300,
        )
        time.sleep(1.0)
        assert not batch.done()
        speech = {"input": "Hello.", "ref_audio": REF_B64, "x_vector_only_mode": True, **SHORT}
        reply = httpx.post(
            running.http + "/v1/audio/speech",
            json={**speech, "response_format": "pcm"},
            headers={"authorization": "Bearer bystander"},
            timeout=60,
        )
        assert reply.status_code == 200, reply.text[:300]
        assert not batch.done()  # the bystander was served while the batch ran
        out = batch.result().json()
        assert out["succeeded"] == ITEMS, [r["error"] for r in out["results"] if r["error"]][:3]
