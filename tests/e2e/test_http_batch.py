"""POST /v1/audio/speech/batch over a real socket (tiny model): per-item
overrides of top-level defaults, audio equal to single requests, items that
fail alone, bad batches refused whole, items running concurrently."""

from __future__ import annotations

import base64
import io
import threading
import time
import wave
from collections.abc import Iterator

import av
import httpx
import numpy as np
import pytest

from tests.serving import RunningServer
from voiceserver.config import Limits


@pytest.fixture(scope="module")
def http(tiny_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=tiny_server.http, timeout=60) as client:
        yield client


@pytest.fixture(autouse=True)
def no_leaks(tiny_server: RunningServer) -> Iterator[None]:
    yield
    deadline = time.monotonic() + 5
    while tiny_server.runtime.engine.snapshot().active_contexts:
        assert time.monotonic() < deadline, "an engine context leaked"
        time.sleep(0.02)


def single(http: httpx.Client, **fields: object) -> np.ndarray:
    """The same speech through /v1/audio/speech, as 24 kHz s16 samples."""
    response = http.post("/v1/audio/speech", json={**fields, "response_format": "pcm"})
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, "<i2")


def samples_of(result: dict) -> np.ndarray:
    data = base64.b64decode(result["audio_data"])
    if result["media_type"] == "audio/pcm":
        return np.frombuffer(data, "<i2")
    if result["media_type"] == "audio/wav":
        with wave.open(io.BytesIO(data)) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
            return np.frombuffer(w.readframes(w.getnframes()), "<i2")
    with av.open(io.BytesIO(data)) as container:
        frames = [f.to_ndarray().reshape(-1) for f in container.decode(audio=0)]
    return np.concatenate(frames)


def same_audio(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal up to float rounding of batched engine steps (one LSB)."""
    return len(a) == len(b) and int(np.max(np.abs(a.astype(int) - b.astype(int)))) <= 1


def batch(http: httpx.Client, body: object) -> dict:
    response = http.post("/v1/audio/speech/batch", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"]
    out = response.json()
    assert set(out) == {"id", "results", "total", "succeeded", "failed"}
    assert [r["index"] for r in out["results"]] == list(range(out["total"]))
    return out


def test_items_override_the_top_level_defaults(http: httpx.Client) -> None:
    out = batch(
        http,
        {
            "voice": "tiny-b",
            "response_format": "pcm",
            "items": [
                {"input": "First item."},
                {"input": "Second item.", "voice": "tiny-a"},
                {"input": "Third item.", "response_format": "wav", "voice": None},
                {"input": "Fourth item.", "speaker": "tiny-a", "response_format": "flac"},
            ],
        },
    )
    assert (out["total"], out["succeeded"], out["failed"]) == (4, 4, 0)
    assert out["id"].startswith("speech-batch-")
    first, second, third, fourth = out["results"]
    assert [r["media_type"] for r in out["results"]] == [
        "audio/pcm",
        "audio/pcm",
        "audio/wav",
        "audio/flac",
    ]
    assert all(r["status"] == "success" and r["error"] is None for r in out["results"])
    assert same_audio(samples_of(first), single(http, input="First item.", voice="tiny-b"))
    assert same_audio(samples_of(second), single(http, input="Second item.", voice="tiny-a"))
    assert same_audio(samples_of(third), single(http, input="Third item.", voice="tiny-b"))
    assert same_audio(samples_of(fourth), single(http, input="Fourth item.", voice="tiny-a"))
    # The voice really changed the audio (the comparisons above can tell voices apart).
    assert not same_audio(samples_of(second), single(http, input="Second item.", voice="tiny-b"))
    usage = first["usage"]
    assert usage["input_tokens"] == len("First item.")
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] > 0


def test_default_format_is_wav_as_in_vllm_omni(http: httpx.Client) -> None:
    (result,) = batch(http, {"items": [{"input": "Hello."}]})["results"]
    assert result["media_type"] == "audio/wav"
    assert base64.b64decode(result["audio_data"])[:4] == b"RIFF"


def test_a_bad_item_fails_alone(http: httpx.Client) -> None:
    items = [
        {"input": "Good one."},
        {"input": "Unknown voice.", "voice": "nobody"},
        {"input": ""},
        {"input": "Too fast.", "speed": 4.5},  # past OpenAI's 4.0
        {"input": "Odd rate.", "sample_rate": 11025},
        {"input": 42},
        {"voice": "tiny-a"},
        {"input": "Another good one."},
    ]
    out = batch(http, {"items": items, "response_format": "pcm"})
    assert (out["total"], out["succeeded"], out["failed"]) == (8, 2, 6)
    results = out["results"]
    assert [r["status"] for r in results] == ["success"] + ["error"] * 6 + ["success"]
    assert [r["param"] for r in results[1:7]] == [
        "voice",
        "input",
        "speed",
        "sample_rate",
        "input",
        "input",
    ]
    for bad in results[1:7]:
        assert bad["audio_data"] is None and bad["usage"] is None and bad["error"]
    assert "tiny-a" in results[1]["error"]  # names what is allowed
    assert same_audio(samples_of(results[7]), single(http, input="Another good one."))


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({}, 400, "items"),
        ({"items": []}, 400, "items"),
        ({"items": "Hello."}, 400, "items"),
        ({"items": [{"input": "x"}] * (Limits().max_batch_items + 1)}, 400, "items"),
        ({"items": [{"input": "x"}, "y"]}, 400, "items[1]"),
        ({"items": [{"input": "x"}], "model": "tts-2"}, 404, "model"),
        ({"items": [{"input": "x"}], "model": 5}, 400, "model"),
        ([{"input": "x"}], 400, None),
    ],
)
def test_a_bad_batch_is_refused_whole(
    http: httpx.Client, body: object, status: int, param: str | None
) -> None:
    response = http.post("/v1/audio/speech/batch", json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["param"] == param
    assert error["message"]


def test_malformed_json_is_a_400(http: httpx.Client) -> None:
    response = http.post("/v1/audio/speech/batch", content=b"{items: [")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


def test_items_run_concurrently(http: httpx.Client, tiny_server: RunningServer) -> None:
    engine = tiny_server.runtime.engine
    peak, done = [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], engine.snapshot().active_contexts)
            time.sleep(0.0005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        text = "Several seconds of tiny speech, " * 12
        out = batch(http, {"response_format": "pcm", "items": [{"input": text}] * 6})
    finally:
        done.set()
        watcher.join()
    assert out["succeeded"] == 6
    assert peak[0] >= 2
    first = samples_of(out["results"][0])
    assert all(same_audio(samples_of(r), first) for r in out["results"][1:])
