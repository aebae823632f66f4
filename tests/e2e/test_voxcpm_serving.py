"""VoxCPM2 served end to end from its checkpoint directory (a tiny random network in the
published layout): the native socket (PCM and Opus, whole text and an LLM's tokens),
OpenAI's HTTP client (instructions included), the vllm-omni socket, voices (inline
clones with and without a transcript, stored clones by name on every endpoint), the
per-unit patch cap, bad input, and ``voiceserver serve --model`` / ``voiceserver
onboard`` on the directory.

A frame is one 160 ms patch (7,680 samples at 48 kHz). The model reads a whole unit of
text before it speaks it: the server's segmenter cuts units and each is one fresh
generation. Random weights stop at random, so every request here is seeded and capped
(``GEN``); the stop head is read only from a unit's fourth patch on (``min_len`` 2), so
a cap of at most 3 gives exactly that many patches a unit."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path

import av
import httpx
import numpy as np
import openai
import pytest
import websockets
from scipy.io import wavfile

from tests.models.chatterbox.ckpt_campplus import speechlike
from tests.models.voxcpm.ckpt import build
from tests.serving import RunningServer, run_server, serve_model_dir
from tests.vllm_session import vllm_session
from tests.wsclient import Client, speak_once
from voiceserver.config import ServerConfig, config_for_checkpoint, with_checkpoint
from voiceserver.onboard import EXIT_OK
from voiceserver.onboard import main as onboard

TEXT = "Hello there, my friend."
LLM_TOKENS = ["Hel", "lo", " there", ",", " my", " fri", "end", "."]
"""TEXT as an LLM streams it: pieces that split words."""
GEN = {"seed": 1, "max_new_tokens": 6}
RATE = 48_000
FRAME = 7680
"""Samples of one 160 ms patch at 48 kHz."""
HTTP_RATE = 24_000
HTTP_FRAME = 3840
"""The HTTP endpoints' and the vllm-omni socket's default rate, and a patch at it."""
FIELDS = ["cfg_value", "seed", "max_new_tokens", "ref_audio", "ref_audio_sample_rate", "ref_text"]
REF_TEXT = "This is the voice."
STYLE = "A calm, low voice."


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("voxcpm") / "voxcpm2", seed=8)


@pytest.fixture(scope="module")
def server(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    # One test client (loopback) is held to half the slots: 8 let it run four at once.
    config = with_checkpoint(config_for_checkpoint(checkpoint, {"max_contexts": 8}), checkpoint)
    voices = tmp_path_factory.mktemp("voices")
    with run_server(config, ServerConfig(voices_dir=voices)) as running:
        yield running


def wav_file(seconds: float, rate: int = 44_100, seed: int = 0) -> bytes:
    out = io.BytesIO()
    wavfile.write(out, rate, speechlike(seconds, seed, rate).astype(np.float32))
    return out.getvalue()


REF = wav_file(1.0, seed=3)
"""A voice to clone: 1 s of speech-like audio (7 patches: the tiny model's context holds
256 positions)."""
REF_B64 = base64.b64encode(REF).decode()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def speak(
    server: RunningServer,
    pieces: list[str],
    cid: str = "a",
    fmt: dict | None = None,
    **create: object,
) -> tuple[bytes, dict, Client]:
    """One context on a fresh socket: ``pieces`` appended one by one, then
    ``context.end``; its audio bytes, ``context.done`` and the client."""
    fmt = fmt or {"encoding": "pcm_s16le", "sample_rate": RATE}
    return await speak_once(server.ws, pieces, fmt, cid, **create)


async def whole(
    server: RunningServer, text: str = TEXT, rate: int = RATE, options: dict | None = None, **create
) -> np.ndarray:
    """``text`` in one append, then the end: 16-bit samples at ``rate``, a whole number of
    patches (the count ``usage`` reports), with no warning but the cap's."""
    fmt = {"encoding": "pcm_s16le", "sample_rate": rate}
    audio, done, client = await speak(server, [text], fmt=fmt, options=options or GEN, **create)
    samples = np.frombuffer(audio, "<i2")
    assert len(samples) == done["usage"]["frames"] * FRAME * rate // RATE > 0
    assert {w["code"] for w in client.got.of_type("warning")} <= {"max_frames_reached"}
    return samples


async def refused(client: Client, cid: str, **create: object) -> dict:
    """A ``context.create`` that must be refused: its error."""
    await client.send(type="context.create", context_id=cid, **create)
    error = await client.until("error", cid, timeout=60)
    assert error["fatal"] is False, error
    return error


async def still_speaks(client: Client, cid: str) -> None:
    await client.send(type="context.create", context_id=cid, options=GEN)
    await client.send(type="text.append", context_id=cid, text="Fine words.")
    await client.send(type="context.end", context_id=cid)
    done = await client.until("context.done", cid, timeout=60)
    assert done["usage"]["frames"] > 0 and len(client.got.audio[cid]) > 0


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """A whole audio file through FFmpeg's demuxers and decoders (PyAV): mono float
    samples and their rate."""
    with av.open(io.BytesIO(data)) as container:
        frames = list(container.decode(audio=0))
    parts = [f.to_ndarray().reshape(-1) for f in frames]
    scale = 32768.0 if parts[0].dtype == np.int16 else 1.0
    return (np.concatenate(parts) / scale).astype(np.float32), frames[0].sample_rate


def best_correlation(reference: np.ndarray, test: np.ndarray, max_lag: int) -> float:
    """Peak normalised correlation over lags 0..max_lag (a codec's delay)."""
    n = min(len(reference), len(test) - max_lag)
    best = -1.0
    for lag in range(max_lag + 1):
        a, b = reference[:n], test[lag : lag + n]
        best = max(best, float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12)))
    return best


def wav_samples(data: bytes) -> np.ndarray:
    """The 16-bit samples of one streamed WAV (44-byte header) at 24 kHz."""
    assert data[:4] == b"RIFF" and int.from_bytes(data[24:28], "little") == HTTP_RATE
    return np.frombuffer(data[44:], "<i2")


def differ(a: np.ndarray, b: np.ndarray) -> bool:
    return not np.array_equal(a[: len(b)], b[: len(a)])


# -- the directory ------------------------------------------------------------------


def test_the_directory_is_recognised_and_onboarded(
    checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = config_for_checkpoint(checkpoint)
    assert config.family == "voxcpm" and config.name == "voxcpm2"
    code = onboard([str(checkpoint), "--no-write"])
    out = capsys.readouterr().out
    assert code == EXIT_OK, out
    assert "family      voxcpm, variant voxcpm2" in out
    assert "weights     match the model" in out and "ok  VoxCPM2:" in out and "BAD" not in out
    assert "ok  AudioVAE decoder:" in out
    assert "based on    configs/voxcpm2.yaml" in out
    # Planning for a GPU sizes the paged KV pool from config.json's max_length.
    code = onboard([str(checkpoint), "--no-write", "--gpu-memory", "80"])
    out = capsys.readouterr().out
    assert code == EXIT_OK, out
    assert "budget 256 positions a stream" in out and "max_contexts" in out


def test_voiceserver_serve_model_dir(checkpoint: Path, tmp_path: Path) -> None:
    """``voiceserver serve --model DIR`` (no --config) picks VoxCPM2 and serves it."""
    with serve_model_dir(checkpoint, tmp_path / "voices") as (base, models):
        entry = models["data"][0]
        assert entry["id"] == "voxcpm2" and entry["family"] == "voxcpm"
        assert entry["sample_rate"] == RATE and entry["voices"] == ["default", "clone"]
        body = {"input": "Hi there.", "response_format": "wav", "options": GEN}
        response = httpx.post(f"{base}/v1/audio/speech", json=body, timeout=60)
        assert response.status_code == 200, response.text
        samples, rate = decode(response.content)
        assert rate == HTTP_RATE and len(samples) > 0 and len(samples) % HTTP_FRAME == 0


# -- the native socket ----------------------------------------------------------------


async def test_voices_and_request_fields_are_listed(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.http, timeout=30) as http:
        entry = (await http.get("/v1/models")).json()["data"][0]
        listing = (await http.get("/v1/audio/voices")).json()
    assert entry["family"] == "voxcpm" and entry["sample_rate"] == RATE
    assert entry["voices"] == ["default", "clone"] and listing["default_voice"] == "default"
    fields = {f["name"]: f for f in entry["option_fields"]}
    assert list(fields) == FIELDS
    assert (fields["cfg_value"]["minimum"], fields["cfg_value"]["maximum"]) == (0, 10)
    assert fields["cfg_value"]["default"] == 2.0 and fields["max_new_tokens"]["minimum"] == 1


async def test_whole_text_in_pcm_and_opus(server: RunningServer) -> None:
    """A whole text and its end: every patch is 7,680 samples at 48 kHz (3,840 at
    24 kHz, the same speech resampled), ``audio_ms`` 160 a patch; the same request in
    Ogg/Opus decodes (PyAV) to that many samples and the same speech."""
    audio, done, _ = await speak(server, [TEXT], options=GEN)
    pcm = np.frombuffer(audio, "<i2")
    frames = done["usage"]["frames"]
    assert done["usage"]["chars"] == len(TEXT) and done["audio_ms"] == frames * 160
    assert len(pcm) == frames * FRAME > 0 and np.abs(pcm).max() > 100
    low = await whole(server, rate=HTTP_RATE)
    assert len(low) == frames * HTTP_FRAME
    ogg = {"encoding": "opus", "sample_rate": RATE, "container": "ogg", "bitrate": 96_000}
    opus, opus_done, _ = await speak(server, [TEXT], fmt=ogg, options=GEN)
    assert opus[:4] == b"OggS" and opus_done["usage"] == done["usage"]
    decoded, rate = decode(opus)
    assert rate == RATE and abs(len(decoded) - len(pcm)) <= 48 * 30
    assert best_correlation(pcm / 32768.0, decoded, 480) > 0.8


async def test_llm_tokens_speak(server: RunningServer) -> None:
    """Text streamed as an LLM's tokens (pieces that split words) is read whole and
    spoken: whole patches, every character counted."""
    audio, done, _ = await speak(server, LLM_TOKENS, options=GEN)
    samples = np.frombuffer(audio, "<i2")
    assert done["usage"]["chars"] == len(TEXT)
    assert len(samples) == done["usage"]["frames"] * FRAME > 0 and np.abs(samples).max() > 100


async def test_seeded_speech_repeats_and_another_seed_differs(server: RunningServer) -> None:
    """The same seeded text again is byte-identical; another seed (the diffusion's
    noise) differs, and so does another ``cfg_value`` (the guidance). Two sessions at
    once step in one batch, whose float rounding differs from a lone step's (about
    5e-7 in a patch on a CPU): the same length, the samples within 1 of 32,768."""
    a = await whole(server)
    b = await whole(server)
    assert np.array_equal(a, b) and np.abs(a).max() > 100
    c = await whole(server, options={**GEN, "seed": 2})
    assert differ(a, c)
    guided = await whole(server, options={**GEN, "cfg_value": 4.5})
    assert differ(a, guided)
    for together in await asyncio.gather(whole(server), whole(server)):
        assert len(together) == len(a)
        assert np.abs(together.astype(np.int32) - a).max() <= 1


async def test_max_new_tokens_caps_each_units_patches(server: RunningServer) -> None:
    """Two sentences are two units; ``max_new_tokens`` caps the patches of each (one
    ``max_frames_reached`` warning for the context). Below the stop head's first
    chance (3 patches) every unit makes exactly the cap."""
    text = "Hello there. The world is good today."
    free, _, _ = await speak(server, [text], options={"seed": 3})
    for cap in (1, 3):
        audio, done, client = await speak(
            server, [text], options={"seed": 3, "max_new_tokens": cap}
        )
        assert [w["code"] for w in client.got.of_type("warning")] == ["max_frames_reached"]
        assert done["usage"]["frames"] == 2 * cap and len(audio) == 2 * cap * FRAME * 2
    assert len(free) > 2 * 3 * FRAME * 2


# -- HTTP and the vllm-omni socket ----------------------------------------------------


def test_openai_client_wav_pcm_and_instructions(server: RunningServer) -> None:
    """OpenAI's client unchanged but for the URL (model fields in ``extra_body``): PCM
    at 24 kHz is the socket's speech, WAV holds the same samples, 48 kHz gives 7,680
    samples a patch. ``instructions`` are taken (no warning) and change the speech of a
    fixed seed; the socket with the same instructions says the same."""
    client = openai.OpenAI(base_url=server.http + "/v1", api_key="unused", max_retries=0)

    def speech(fmt: str, **kwargs: object) -> tuple[bytes, httpx.Headers]:
        extra = {"options": GEN, **kwargs.pop("extra", {})}  # type: ignore[dict-item]
        response = client.audio.speech.with_raw_response.create(
            model="voxcpm2",
            voice="default",
            input=TEXT,
            response_format=fmt,  # type: ignore[arg-type]
            extra_body=extra,
            **kwargs,  # type: ignore[arg-type]
        )
        return response.content, response.headers

    pcm_bytes, _ = speech("pcm")
    pcm = np.frombuffer(pcm_bytes, "<i2")
    assert len(pcm) > 0 and len(pcm) % HTTP_FRAME == 0 and np.abs(pcm).max() > 100
    assert np.array_equal(pcm, asyncio.run(whole(server, rate=HTTP_RATE)))
    wav, _ = speech("wav")
    samples, rate = decode(wav)
    assert wav[:4] == b"RIFF" and rate == HTTP_RATE
    assert np.array_equal(np.round(samples * 32768).astype("<i2"), pcm)
    high, _ = speech("pcm", extra={"sample_rate": RATE})
    assert len(high) // 2 == len(pcm) * 2
    assert np.array_equal(np.frombuffer(high, "<i2"), asyncio.run(whole(server)))
    styled_bytes, headers = speech("pcm", instructions=STYLE)
    assert "warning" not in headers
    styled = np.frombuffer(styled_bytes, "<i2")
    assert len(styled) % HTTP_FRAME == 0 and differ(styled, pcm)
    on_socket = asyncio.run(whole(server, rate=HTTP_RATE, instructions=STYLE))
    assert np.array_equal(styled, on_socket)


async def test_vllm_omni_socket(server: RunningServer) -> None:
    """vllm-omni's socket speaks (a WAV at 24 kHz): the same seeded speech as HTTP."""
    audio = await vllm_session(server, {"voice": "default", **GEN}, TEXT)
    samples = wav_samples(audio)
    assert len(samples) > 0 and len(samples) % HTTP_FRAME == 0 and np.abs(samples).max() > 100
    assert np.array_equal(samples, await whole(server, rate=HTTP_RATE))


# -- voices -----------------------------------------------------------------------------


async def test_inline_clones_on_every_endpoint(server: RunningServer) -> None:
    """``ref_audio`` with and without its transcript on the socket, over HTTP and on
    the vllm-omni socket: each the same speech everywhere, neither the default voice,
    and the transcript changes the clone (it is the continuation prompt)."""
    default = await whole(server, rate=HTTP_RATE)
    speech: dict[str, np.ndarray] = {}
    async with httpx.AsyncClient(base_url=server.http, timeout=60) as http:
        for kind, extra in (("audio", {}), ("both", {"ref_text": REF_TEXT})):
            clone = {"ref_audio": REF_B64, **extra}
            on_socket = await whole(server, rate=HTTP_RATE, voice="clone", **clone)
            body = {"input": TEXT, "response_format": "pcm", "voice": "clone", **GEN, **clone}
            response = await http.post("/v1/audio/speech", json=body)
            assert response.status_code == 200, response.text
            assert np.array_equal(np.frombuffer(response.content, "<i2"), on_socket)
            base = {"task_type": "Base", **GEN, **clone}
            assert np.array_equal(wav_samples(await vllm_session(server, base, TEXT)), on_socket)
            assert differ(on_socket, default) and np.abs(on_socket).max() > 100
            speech[kind] = on_socket
    assert differ(speech["audio"], speech["both"])


async def test_a_clone_from_raw_samples(server: RunningServer) -> None:
    """``ref_audio`` as raw samples with ``ref_audio_sample_rate`` (HTTP; the socket
    takes encoded audio) clones as the same samples in a WAV file do; samples without
    their rate are refused naming ``ref_audio_sample_rate``."""
    samples = speechlike(1.0, 5, 16_000).astype(np.float32)
    out = io.BytesIO()
    wavfile.write(out, 16_000, samples)
    from_file = await whole(server, rate=HTTP_RATE, voice="clone", ref_audio=b64(out.getvalue()))
    raw = {"ref_audio": samples.tolist(), "options": {**GEN, "ref_audio_sample_rate": 16_000}}
    assert differ(from_file, await whole(server, rate=HTTP_RATE))
    body = {"input": TEXT, "response_format": "pcm", "voice": "clone", **GEN}
    async with httpx.AsyncClient(base_url=server.http, timeout=60) as http:
        response = await http.post("/v1/audio/speech", json={**body, **raw})
        assert response.status_code == 200, response.text
        assert np.array_equal(np.frombuffer(response.content, "<i2"), from_file)
        no_rate = {**body, "ref_audio": samples.tolist()}
        response = await http.post("/v1/audio/speech", json=no_rate)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "ref_audio_sample_rate"


async def test_stored_clones_speak_by_name_as_inline(server: RunningServer) -> None:
    """``POST /v1/audio/voices`` stores a clone from audio alone and one with its
    transcript; each, named on the socket, over HTTP and on the vllm-omni socket,
    says what the same reference inline says."""
    stored = {"Narrator": {}, "Reader": {"ref_text": REF_TEXT}}
    async with httpx.AsyncClient(base_url=server.http, timeout=60) as http:
        for name, extra in stored.items():
            files = {"audio_sample": ("ref.wav", REF, "audio/wav")}
            created = await http.post("/v1/audio/voices", data={"name": name, **extra}, files=files)
            assert created.status_code == 200, created.text
        listing = (await http.get("/v1/audio/voices")).json()
        assert {"Narrator", "Reader", "clone", "default"} <= set(listing["voices"])
        for name, extra in stored.items():
            inline = await whole(server, rate=HTTP_RATE, voice="clone", ref_audio=REF_B64, **extra)
            assert np.array_equal(await whole(server, rate=HTTP_RATE, voice=name), inline)
            body = {"input": TEXT, "response_format": "pcm", "voice": name, **GEN}
            response = await http.post("/v1/audio/speech", json=body)
            assert response.status_code == 200, response.text
            assert np.array_equal(np.frombuffer(response.content, "<i2"), inline)
            by_name = await vllm_session(server, {"voice": name, **GEN}, TEXT)
            assert np.array_equal(wav_samples(by_name), inline)


# -- bad input ----------------------------------------------------------------------------

BAD = {
    # id: (request fields, code, param, words of the message)
    "voice": ({"voice": "nobody"}, "unknown_voice", "voice", "default, clone"),
    "no-ref": ({"voice": "clone"}, "missing_field", "ref_audio", "needs reference audio"),
    "junk": (
        {"voice": "clone", "ref_audio": b64(b"not audio, bytes")},
        "invalid_field",
        "ref_audio",
        "not decodable",
    ),
    "empty": ({"voice": "clone", "ref_audio": ""}, "invalid_field", "ref_audio", "empty"),
    "short": (
        {"voice": "clone", "ref_audio": b64(wav_file(0.3))},
        "invalid_field",
        "ref_audio",
        "at least 0.5 s",
    ),
    "ref-text": (
        {"voice": "clone", "ref_audio": REF_B64, "ref_text": ""},
        "invalid_field",
        "ref_text",
        "non-empty",
    ),
    "cfg-high": ({"options": {"cfg_value": 11}}, "invalid_field", "cfg_value", "from 0 to 10"),
    "cfg-low": ({"options": {"cfg_value": -1}}, "invalid_field", "cfg_value", "from 0 to 10"),
    "cap": ({"options": {"max_new_tokens": 0}}, "invalid_field", "max_new_tokens", "from 1"),
}
"""Refused at ``context.create``."""


async def test_bad_requests_name_the_field_on_the_socket(server: RunningServer) -> None:
    client = await Client.connect(server.ws)
    for cid, (fields, code, param, says) in BAD.items():
        error = await refused(client, cid, **fields)
        assert error["code"] == code and error["param"] == param, error
        assert says in error["message"], error
    await still_speaks(client, "after")
    await client.close()


async def test_bad_requests_are_http_400_naming_the_field(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.http, timeout=60) as http:
        for fields, code, param, says in BAD.values():
            body = {"input": TEXT, "response_format": "pcm", **fields}
            response = await http.post("/v1/audio/speech", json=body)
            assert response.status_code == 400, (fields, response.text)
            error = response.json()["error"]
            assert error["code"] == code and error["param"] == param, error
            assert says in error["message"], error
        response = await http.post("/v1/audio/speech", json={"input": "<unk>", **GEN})
        assert response.status_code == 400 and response.json()["error"]["param"] == "input"


async def test_text_the_model_cannot_read_is_refused(server: RunningServer) -> None:
    """Control tokens spelled out in text (``<unk>``, ``<|audio_start|>``: they would
    steer the model) are refused naming the text; the socket goes on."""
    client = await Client.connect(server.ws)
    await client.send(type="context.create", context_id="unk", options=GEN)
    await client.send(type="text.append", context_id="unk", text="<unk>")
    await client.send(type="context.end", context_id="unk")
    error = await client.until("error", "unk", timeout=60)
    assert error["code"] == "invalid_field" and error["param"] in ("input", "text"), error
    assert "<unk>" in error["message"]
    await client.until("context.cancelled", "unk")
    await still_speaks(client, "after")
    await client.close()


async def test_bad_voice_uploads_name_the_field(server: RunningServer) -> None:
    """``POST /v1/audio/voices`` refuses audio it cannot clone from and a transcript
    the model cannot read, naming the form field; nothing is stored."""
    uploads = {
        "Junk": (b"not audio, bytes", {}, "audio_sample", "not decodable"),
        "Short": (wav_file(0.3), {}, "audio_sample", "too short"),
        "Unread": (REF, {"ref_text": "<unk>"}, "ref_text", "control tokens are not allowed"),
    }
    async with httpx.AsyncClient(base_url=server.http, timeout=60) as http:
        for name, (audio, extra, param, says) in uploads.items():
            files = {"audio_sample": ("ref.wav", audio, "audio/wav")}
            response = await http.post(
                "/v1/audio/voices", data={"name": name, **extra}, files=files
            )
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["param"] == param and says in error["message"], error
        listing = (await http.get("/v1/audio/voices")).json()
    assert not set(uploads) & set(listing["voices"])


LONG = "Speak slowly and warmly, like an old storyteller by the fire. " * 10
"""Over 400 tokens of the tiny tokenizer: more than a context of the tiny model holds."""


async def test_a_prompt_that_leaves_no_room_is_refused(server: RunningServer) -> None:
    """Every unit's prompt carries the instructions and a clone's transcript: ones too
    long for a context (the tiny model's holds 256 positions) are refused naming the
    field on every endpoint and at upload, not answered with no audio."""
    client = await Client.connect(server.ws)
    error = await refused(client, "style", instructions=LONG, options=GEN)
    assert error["code"] == "invalid_field" and error["param"] == "instructions", error
    assert "leave no room" in error["message"]
    clone = {"voice": "clone", "ref_audio": REF_B64, "ref_text": LONG}
    error = await refused(client, "transcript", options=GEN, **clone)
    assert error["code"] == "invalid_field" and error["param"] == "ref_text", error
    assert "leaves no room" in error["message"]
    await still_speaks(client, "after")
    await client.close()
    async with httpx.AsyncClient(base_url=server.http, timeout=60) as http:
        body = {"input": TEXT, "response_format": "pcm", **GEN}
        for extra, param in (({"instructions": LONG}, "instructions"), (clone, "ref_text")):
            response = await http.post("/v1/audio/speech", json={**body, **extra})
            assert response.status_code == 400, response.text
            assert response.json()["error"]["param"] == param
        files = {"audio_sample": ("ref.wav", REF, "audio/wav")}
        form = {"name": "Talker", "ref_text": LONG}
        response = await http.post("/v1/audio/voices", data=form, files=files)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == "ref_text"
    url = f"ws://{server.host}:{server.port}/v1/audio/speech/stream"
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"type": "session.config", "instructions": LONG, **GEN}))
        await ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        await ws.send(json.dumps({"type": "input.done"}))
        while (message := json.loads(await asyncio.wait_for(ws.recv(), 60)))["type"] != "error":
            pass
    assert "instructions: " in message["message"] and "leave no room" in message["message"]


async def test_a_bad_client_does_not_disturb_another(server: RunningServer) -> None:
    """While one session's context is open and speaking, another sends every bad
    request to the same server: the first gets exactly the speech it gets alone."""
    options = {"seed": 4, "max_new_tokens": 8}
    alone = await whole(server, options=options)
    good = await Client.connect(server.ws)
    fmt = {"encoding": "pcm_s16le", "sample_rate": RATE}
    await good.send(type="context.create", context_id="good", output_format=fmt, options=options)
    await good.send(type="text.append", context_id="good", text=TEXT)
    await good.until_audio("good", timeout=60)
    bad = await Client.connect(server.ws)
    for cid, (fields, _, param, _) in BAD.items():
        assert (await refused(bad, cid, **fields))["param"] == param
    await bad.send(type="context.create", context_id="unk", options=GEN)
    await bad.send(type="text.append", context_id="unk", text="<unk>")
    await bad.send(type="context.end", context_id="unk")
    assert (await bad.until("error", "unk", timeout=60))["code"] == "invalid_field"
    await bad.close()
    await good.send(type="context.end", context_id="good")
    await good.until("context.done", "good", timeout=60)
    await good.close()
    assert not good.got.of_type("error")
    assert np.array_equal(np.frombuffer(bytes(good.got.audio["good"]), "<i2"), alone)
