"""Whole files (``stream: false``, batch items) carry their true length in their
headers, read back by Python's ``wave`` and by PyAV; streamed WAV keeps its
open-ended sizes. Language names and ISO codes in any spelling reach every model."""

from __future__ import annotations

import base64
import io
import wave
from collections.abc import Iterator

import av
import httpx
import openai
import pytest

from tests.serving import RunningServer, run_server
from voiceserver.config import ServerConfig, load_model_config

TEXT = "Hello there, how are you today?"
RATE = 24000


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    config = load_model_config("piper-joe", {"noise_scale": 0, "noise_w_scale": 0})
    with run_server(config, ServerConfig()) as running:
        yield running


@pytest.fixture(scope="module")
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def samples(http: httpx.Client) -> int:
    """Samples (24 kHz) of TEXT, from the raw pcm response."""
    response = http.post("/v1/audio/speech", json={"input": TEXT, "response_format": "pcm"})
    return len(response.content) // 2


def probe(data: bytes) -> tuple[float, int, int]:
    """PyAV's reported duration (s), decoded samples, and the stream's rate."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        duration = float(stream.duration * stream.time_base) if stream.duration else None
        if duration is None and container.duration:
            duration = container.duration / 1e6
        decoded = sum(f.samples for f in container.decode(audio=0))
        return duration or 0.0, decoded, stream.rate


def test_whole_wav_has_its_real_sizes(http: httpx.Client, samples: int) -> None:
    response = http.post(
        "/v1/audio/speech", json={"input": TEXT, "response_format": "wav", "stream": False}
    )
    assert response.status_code == 200
    assert int(response.headers["content-length"]) == len(response.content)
    with wave.open(io.BytesIO(response.content)) as w:
        assert w.getframerate() == RATE and w.getnframes() == samples
        assert len(w.readframes(w.getnframes())) == 2 * samples
    riff = int.from_bytes(response.content[4:8], "little")
    assert riff == len(response.content) - 8


def test_streamed_wav_keeps_open_sizes(http: httpx.Client) -> None:
    response = http.post("/v1/audio/speech", json={"input": TEXT, "response_format": "wav"})
    assert response.content[4:8] == b"\xff\xff\xff\xff"


def test_whole_flac_states_its_sample_count(http: httpx.Client, samples: int) -> None:
    response = http.post(
        "/v1/audio/speech", json={"input": TEXT, "response_format": "flac", "stream": False}
    )
    data = response.content
    assert data[:4] == b"fLaC"
    # STREAMINFO: 36 bits of total samples at byte 8 + 13 of the block (after the 4-byte header)
    info = data[8:42]
    total = ((info[13] & 0x0F) << 32) | int.from_bytes(info[14:18], "big")
    assert total == samples
    duration, decoded, rate = probe(data)
    assert rate == RATE and decoded == samples and duration == pytest.approx(samples / RATE)


def test_whole_aac_reports_the_duration_it_holds(http: httpx.Client, samples: int) -> None:
    response = http.post(
        "/v1/audio/speech", json={"input": TEXT, "response_format": "aac", "stream": False}
    )
    assert response.headers["content-type"] == "audio/mp4"
    duration, decoded, rate = probe(response.content)
    assert rate == RATE
    assert duration == pytest.approx(samples / RATE, abs=1e-3)
    # What decodes is the audio plus at most the last AAC frame's padding.
    assert samples <= decoded < samples + 1024


def test_batch_items_are_whole_files(http: httpx.Client, samples: int) -> None:
    body = {
        "items": [{"input": TEXT}, {"input": TEXT, "response_format": "flac"}],
        "model": "tts-1",
    }
    result = http.post("/v1/audio/speech/batch", json=body).json()
    assert result["succeeded"] == 2, result
    wav_bytes = base64.b64decode(result["results"][0]["audio_data"])
    with wave.open(io.BytesIO(wav_bytes)) as w:
        assert w.getnframes() == samples
    _, decoded, _ = probe(base64.b64decode(result["results"][1]["audio_data"]))
    assert decoded == samples


def test_stream_false_with_sse_is_refused(http: httpx.Client) -> None:
    response = http.post(
        "/v1/audio/speech", json={"input": TEXT, "stream": False, "stream_format": "sse"}
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == "stream"


def test_openai_client_reads_a_whole_wav(server: RunningServer, samples: int) -> None:
    client = openai.OpenAI(base_url=server.http + "/v1", api_key="x", max_retries=0)
    response = client.audio.speech.create(
        model="tts-1",
        voice="alloy",
        input=TEXT,
        response_format="wav",
        extra_body={"stream": False},
    )
    with wave.open(io.BytesIO(response.content)) as w:
        assert w.getnframes() == samples


# -- languages ------------------------------------------------------------------------------


@pytest.mark.parametrize("language", ["English", "english", "en", "EN", "en-US", "Auto", "auto"])
def test_language_names_and_codes_are_alike(
    http: httpx.Client, samples: int, language: str
) -> None:
    response = http.post(
        "/v1/audio/speech", json={"input": TEXT, "response_format": "pcm", "language": language}
    )
    assert response.status_code == 200, response.text
    assert len(response.content) // 2 == samples


@pytest.mark.parametrize("language", ["French", "fr", "Klingon"])
def test_a_language_the_model_lacks_lists_what_is_allowed(
    http: httpx.Client, language: str
) -> None:
    response = http.post("/v1/audio/speech", json={"input": TEXT, "language": language})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "language" and error["code"] == "unsupported_language"
    assert "English (en)" in error["message"] and language in error["message"]


async def test_language_names_on_the_native_socket(server: RunningServer) -> None:
    from tests.wsclient import Client

    ws = await Client.connect(server.ws)
    await ws.send(type="context.create", context_id="a", language="English")
    await ws.send(type="text.append", context_id="a", text="Hi there.")
    await ws.send(type="context.end", context_id="a")
    done = await ws.until("context.done", "a", timeout=60)
    await ws.close()
    assert done["audio_ms"] > 0 and len(bytes(ws.got.audio["a"])) > 0
