"""VoXtream2 served end to end from its checkpoint directory (a tiny random network in
the published layout, Kyutai's Mimi file and a tiny ReDimNet speaker encoder beside
it): text streamed word by word and in tokens that split words, the native socket
(PCM and Opus), OpenAI's HTTP client, the vllm-omni socket, voices (named prompts,
inline clones, stored clones by name on every endpoint), the speaking rate, bad
input, and ``voiceserver serve --model`` / ``voiceserver onboard`` on the directory.

Random weights end an utterance at random; greedy settings with a seed
(``GREEDY``) make each request's frames repeat. A context whose whole text comes in
one append followed by ``context.end`` (and every HTTP request) is read in one go,
so its frames do not depend on timing; text streamed word by word is read as it
arrives, and its frames depend on when each word lands relative to the frames (as
in the reference), so streamed contexts are checked for shape, not for bytes."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Iterator
from pathlib import Path

import av
import httpx
import numpy as np
import openai
import pytest
from scipy.io import wavfile

from models.voxtream.speaker import SPEAKER_FILE
from tests.models.chatterbox.ckpt_campplus import speechlike
from tests.models.voxtream.ckpt import build
from tests.models.voxtream.ckpt_redimnet import write_redimnet
from tests.serving import RunningServer, run_server, serve_model_dir
from tests.vllm_session import vllm_session
from tests.wsclient import Client, speak_once
from voiceserver.config import (
    ServerConfig,
    config_for_checkpoint,
    with_checkpoint,
    with_engine_overrides,
)
from voiceserver.onboard import EXIT_OK
from voiceserver.onboard import main as onboard

TEXT = "Hello there, my friend."
LLM_TOKENS = ["Hello", " there", ",", " my", " fri", "end", "."]
"""TEXT as an LLM streams it: words, punctuation and a word split in two."""
GREEDY = {"top_k": 1, "top_p": 0, "seed": 1}
RATE = 24_000
FRAME = 1920
"""Samples of one 80 ms frame at 24 kHz."""
FIELDS = {
    "speaking_rate",
    "temperature",
    "top_k",
    "top_p",
    "cfg_gamma",
    "seed",
    "max_new_tokens",
    "ref_audio",
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build(tmp_path_factory.mktemp("voxtream") / "voxtream2")
    write_redimnet(root / SPEAKER_FILE)
    return root


@pytest.fixture(scope="module")
def server(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    # Every test client is one client (loopback), held to half the slots: 8 slots
    # let it run four contexts at once. Admission by measured load is off: on a busy
    # 2-core machine the tiny model's measured load refused or queued contexts at
    # random (these tests are about speech, not admission).
    config = with_checkpoint(config_for_checkpoint(checkpoint, {"max_contexts": 8}), checkpoint)
    config = with_engine_overrides(config, {"admission_load": 0})
    voices = tmp_path_factory.mktemp("voices")
    with run_server(config, ServerConfig(voices_dir=voices)) as running:
        yield running


def wav_file(seconds: float, rate: int = 44_100, seed: int = 0, silent: bool = False) -> bytes:
    samples = speechlike(seconds, seed, rate).astype(np.float32)
    out = io.BytesIO()
    wavfile.write(out, rate, samples * 0 if silent else samples)
    return out.getvalue()


REF = wav_file(2.0, seed=3)
"""A voice to clone: 2 s of speech-like audio (the tiny model's window holds 2.3 s)."""
REF_B64 = base64.b64encode(REF).decode()


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


async def whole(server: RunningServer, text: str = TEXT, **create: object) -> np.ndarray:
    """``text`` in one append, then the end: 16-bit samples at 24 kHz."""
    audio, done, _ = await speak(server, [text], **create)
    samples = np.frombuffer(audio, "<i2")
    assert len(samples) == done["usage"]["frames"] * FRAME > 0
    return samples


async def refused(client: Client, cid: str, **create: object) -> dict:
    """A ``context.create`` that must be refused: its error."""
    await client.send(type="context.create", context_id=cid, **create)
    error = await client.until("error", timeout=60)
    assert error["context_id"] == cid and error["fatal"] is False, error
    return error


async def still_speaks(client: Client, cid: str) -> None:
    await client.send(type="context.create", context_id=cid, options=GREEDY)
    await client.send(type="text.append", context_id=cid, text="Fine words.")
    await client.send(type="context.end", context_id=cid)
    done = await client.until("context.done", cid, timeout=60)
    assert done["usage"]["frames"] > 0 and len(client.got.audio[cid]) > 0


def best_correlation(reference: np.ndarray, test: np.ndarray, max_lag: int) -> float:
    """Peak normalised correlation over lags 0..max_lag (a codec's delay)."""
    n = min(len(reference), len(test) - max_lag)
    best = -1.0
    for lag in range(max_lag + 1):
        a, b = reference[:n], test[lag : lag + n]
        best = max(best, float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12)))
    return best


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """A whole audio file through FFmpeg's demuxers and decoders (PyAV): mono float
    samples and their rate."""
    with av.open(io.BytesIO(data)) as container:
        frames = list(container.decode(audio=0))
    parts = [f.to_ndarray().reshape(-1) for f in frames]
    scale = 32768.0 if parts[0].dtype == np.int16 else 1.0
    return (np.concatenate(parts) / scale).astype(np.float32), frames[0].sample_rate


# -- the directory ------------------------------------------------------------------


def test_the_directory_is_recognised_and_onboarded(
    checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = config_for_checkpoint(checkpoint)
    assert config.family == "voxtream" and config.name == "voxtream2"
    code = onboard([str(checkpoint), "--no-write"])
    out = capsys.readouterr().out
    assert code == EXIT_OK, out
    assert "family      voxtream, variant voxtream2" in out
    assert "weights     match the model" in out and "ok  VoXtream2:" in out and "BAD" not in out
    assert "based on    configs/voxtream2.yaml" in out


def test_voiceserver_serve_model_dir(checkpoint: Path, tmp_path: Path) -> None:
    """``voiceserver serve --model DIR`` (no --config) picks VoXtream2 and serves it."""
    with serve_model_dir(checkpoint, tmp_path / "voices") as (base, models):
        entry = models["data"][0]
        assert entry["id"] == "voxtream2" and entry["family"] == "voxtream"
        assert entry["sample_rate"] == RATE and entry["voices"] == ["default", "second", "clone"]
        body = {"input": "Hi there.", "response_format": "wav", "options": GREEDY}
        response = httpx.post(f"{base}/v1/audio/speech", json=body, timeout=60)
        assert response.status_code == 200, response.text
        samples, rate = decode(response.content)
        assert rate == RATE and len(samples) > 0 and len(samples) % FRAME == 0


# -- the native socket ----------------------------------------------------------------


async def test_voices_and_request_fields_are_listed(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.http, timeout=30) as http:
        entry = (await http.get("/v1/models")).json()["data"][0]
        listing = (await http.get("/v1/audio/voices")).json()
    assert entry["family"] == "voxtream" and entry["streaming_text"] is True
    assert entry["voices"] == ["default", "second", "clone"]
    assert listing["default_voice"] == "default"
    assert {"default", "second", "clone"} <= set(listing["voices"])
    fields = {f["name"]: f for f in entry["option_fields"]}
    assert set(fields) >= FIELDS
    assert fields["temperature"]["exclusive_minimum"] is True
    assert (fields["speaking_rate"]["minimum"], fields["speaking_rate"]["maximum"]) == (2, 6)
    client = await Client.connect(server.ws)
    created = client.got.messages[0]
    await client.close()
    assert [f["name"] for f in created["option_fields"]] == list(fields)


async def test_tokens_that_split_words_are_spoken_as_words(server: RunningServer) -> None:
    """An LLM's tokens cut words ("Hel", "lo wor", "ld."): the model reads whole
    words (the word timestamps name them), and the audio is whole 80 ms frames."""
    audio, done, client = await speak(
        server, ["Hel", "lo wor", "ld."], timestamps="word", options=GREEDY
    )
    samples = np.frombuffer(audio, "<i2")
    assert done["usage"] == {"chars": 12, "frames": done["usage"]["frames"]}
    assert len(samples) == done["usage"]["frames"] * FRAME > 0
    assert done["audio_ms"] == done["usage"]["frames"] * 80
    assert np.abs(samples).max() > 100
    words = [w for m in client.got.of_type("timestamps") for w in m["words"]]
    assert [(w["text"], w["char_start"], w["char_end"]) for w in words] == [
        ("Hello", 0, 5),
        ("world.", 6, 12),
    ]
    for a, b in zip(words, words[1:], strict=False):
        assert a["start_ms"] <= b["start_ms"] and a["end_ms"] <= b["end_ms"], (a, b)
    assert all(0 <= w["start_ms"] <= w["end_ms"] <= done["audio_ms"] for w in words)


async def test_llm_tokens_in_opus_decode_to_the_speech(server: RunningServer) -> None:
    """Text streamed as an LLM's tokens, in Ogg/Opus: a stock decoder plays
    ``audio_ms`` of it. The same whole text in Opus and in PCM is the same speech."""
    ogg = {"encoding": "opus", "sample_rate": 48_000, "container": "ogg", "bitrate": 96_000}
    audio, done, _ = await speak(server, LLM_TOKENS, fmt=ogg, options=GREEDY)
    assert audio[:4] == b"OggS" and done["usage"]["frames"] > 0
    samples, rate = decode(audio)
    assert rate == 48_000 and abs(len(samples) - done["audio_ms"] * 48) <= 48 * 30
    f32 = {"encoding": "pcm_f32le", "sample_rate": 48_000}
    pcm, _, _ = await speak(server, [TEXT], fmt=f32, options=GREEDY)
    reference = np.frombuffer(pcm, "<f4")
    opus, _, _ = await speak(server, [TEXT], fmt=ogg, options=GREEDY)
    decoded, _ = decode(opus)
    assert abs(len(decoded) - len(reference)) <= 48 * 30
    assert best_correlation(reference, decoded, 480) > 0.8


async def test_speech_starts_on_the_first_words(server: RunningServer) -> None:
    """Full-stream: audio comes while the rest of the text has not been sent (no
    flush, no end); the rest then continues the utterance. A context cancelled
    mid-speech (barge-in) sends nothing after ``context.cancelled``."""
    client = await Client.connect(server.ws)
    first, rest = ["Hello", " there", " my", " good"], [" old", " friend."]
    for cid in ("go", "stop"):
        await client.send(type="context.create", context_id=cid, options=GREEDY)
        for token in first:
            await client.send(type="text.append", context_id=cid, text=token)
        await client.until_audio(cid, timeout=60)
    for token in rest:
        await client.send(type="text.append", context_id="go", text=token)
    await client.send(type="context.end", context_id="go")
    await client.send(type="context.cancel", context_id="stop")
    cancelled = await client.until("context.cancelled", "stop", timeout=60)
    done = await client.until("context.done", "go", timeout=60)
    await client.drain(0.3)
    await client.close()
    assert not client.got.of_type("error")
    assert done["usage"]["chars"] == len("".join(first + rest))
    assert len(client.got.audio["go"]) == done["usage"]["frames"] * FRAME * 2 > 0
    heard = len(client.got.audio["stop"])
    assert heard > 0 and cancelled["audio_sent_ms"] * 48 == heard
    after = client.got.order[client.got.order.index(("msg", "context.cancelled")) :]
    assert ("audio", "stop") not in after


async def test_a_long_stream_passes_the_window(server: RunningServer) -> None:
    """A paragraph streamed word by word runs past the model's temporal window (40
    frames in the test checkpoint; its cache is rebuilt) and is spoken to the end:
    every word is timed, once and in order."""
    sentence = (
        "The quick brown fox jumps over the lazy dog while the band plays on, and everyone "
        "in the square turns to watch the little parade go by in the evening sun."
    )
    text = " ".join([sentence] * 2)
    tokens = [w if i == 0 else " " + w for i, w in enumerate(text.split(" "))]
    audio, done, client = await speak(server, tokens, timestamps="word", options=GREEDY)
    window = 40
    assert done["usage"]["frames"] > 2 * window
    assert len(audio) == done["usage"]["frames"] * FRAME * 2
    words = [w for m in client.got.of_type("timestamps") for w in m["words"]]
    assert [w["text"] for w in words] == text.split(" ")
    assert all(text[w["char_start"] : w["char_end"]] == w["text"] for w in words)


async def test_two_contexts_on_one_socket(server: RunningServer) -> None:
    """Two contexts streamed word by word at once, interleaved on one socket: each
    gets its own stream of whole frames and its own ``context.done``."""
    client = await Client.connect(server.ws)
    for cid, voice in (("one", "default"), ("two", "second")):
        await client.send(type="context.create", context_id=cid, voice=voice, options=GREEDY)
    for token in LLM_TOKENS:
        for cid in ("one", "two"):
            await client.send(type="text.append", context_id=cid, text=token)
    for cid in ("one", "two"):
        await client.send(type="context.end", context_id=cid)
    done = {cid: await client.until("context.done", cid, timeout=60) for cid in ("one", "two")}
    await client.close()
    assert not client.got.of_type("error")
    assert client.got.streams["one"] != client.got.streams["two"]
    for cid in ("one", "two"):
        frames = done[cid]["usage"]["frames"]
        assert frames > 0 and len(client.got.audio[cid]) == frames * FRAME * 2
        assert done[cid]["usage"]["chars"] == len(TEXT)


async def test_flush_speaks_what_it_can_and_end_finishes(server: RunningServer) -> None:
    """``context.flush`` releases every word at once; ``context.flushed`` comes once
    the model has spoken all it can before it needs more text, its last frame
    flagged; more text continues the same utterance, ``context.end`` says the rest,
    the last frame flagged, and text after the end is refused."""
    client = await Client.connect(server.ws)
    await client.send(type="context.create", context_id="f", options=GREEDY)
    await client.send(type="text.append", context_id="f", text="Hello there my")
    await client.send(type="context.flush", context_id="f", flush_id="turn-1")
    flushed = await client.until("context.flushed", "f", timeout=60)
    assert flushed["flush_id"] == "turn-1" and flushed["audio_ms"] > 0
    assert len(client.got.audio["f"]) == flushed["audio_ms"] * 48  # 24 kHz s16le
    stream = client.got.streams["f"]
    frames = [flags for s, _, flags, _ in client.got.frames if s == stream]
    assert frames[-1] & 1 and not any(flags & 2 for flags in frames)
    await client.send(type="text.append", context_id="f", text=" friend.")
    await client.send(type="context.end", context_id="f")
    await client.send(type="text.append", context_id="f", text=" More.")
    error = await client.until("error", timeout=60)
    assert error["code"] == "context_closed" and error["context_id"] == "f"
    done = await client.until("context.done", "f", timeout=60)
    await client.close()
    assert done["audio_ms"] > flushed["audio_ms"]
    assert len(client.got.audio["f"]) == done["usage"]["frames"] * FRAME * 2
    frames = [flags for s, _, flags, _ in client.got.frames if s == stream]
    assert frames[-1] & 2 and sum(bool(flags & 2) for flags in frames) == 1


async def test_seeded_speech_repeats_across_sessions(server: RunningServer) -> None:
    """The same whole text sent the same way by two sessions at once: greedy speech
    is byte-identical, and so is sampled speech with the same seed; another seed
    differs."""
    a, b = await asyncio.gather(whole(server, options=GREEDY), whole(server, options=GREEDY))
    assert np.array_equal(a, b) and np.abs(a).max() > 100
    sampled = {"temperature": 0.9, "top_k": 5, "top_p": 0.9}
    c, d = await asyncio.gather(
        whole(server, options={**sampled, "seed": 7}), whole(server, options={**sampled, "seed": 7})
    )
    assert np.array_equal(c, d)
    e = await whole(server, options={**sampled, "seed": 8})
    assert not np.array_equal(c[: len(e)], e[: len(c)])


async def test_max_new_tokens_caps_the_frames(server: RunningServer) -> None:
    """``max_new_tokens`` N (a cap on frames, 12.5 a second): N frames of audio, then
    the context ends with one ``max_frames_reached`` warning, as every family does."""
    audio, done, client = await speak(server, [TEXT], options={**GREEDY, "max_new_tokens": 3})
    assert [w["code"] for w in client.got.of_type("warning")] == ["max_frames_reached"]
    assert done["usage"]["frames"] == 3 and len(audio) == 3 * FRAME * 2


# -- HTTP and the vllm-omni socket ----------------------------------------------------


def test_openai_client_gets_wav_pcm_and_mp3(server: RunningServer) -> None:
    """OpenAI's client unchanged but for the URL: PCM is the socket's speech at
    24 kHz, WAV holds the same samples, MP3 decodes to their length (plus the
    encoder's delay and padding), and another rate scales the length."""
    client = openai.OpenAI(base_url=server.http + "/v1", api_key="unused", max_retries=0)

    def speech(fmt: str, **extra: object) -> bytes:
        return client.audio.speech.create(
            model="voxtream2",
            voice="default",
            input=TEXT,
            response_format=fmt,  # type: ignore[arg-type]
            extra_body={"options": GREEDY, **extra},
        ).content

    pcm = np.frombuffer(speech("pcm"), "<i2")
    assert len(pcm) > 0 and len(pcm) % FRAME == 0 and np.abs(pcm).max() > 100
    socket_pcm = asyncio.run(whole(server, options=GREEDY))
    assert np.array_equal(pcm, socket_pcm)
    wav = speech("wav")
    assert wav[:4] == b"RIFF"
    samples, rate = decode(wav)
    assert rate == RATE and np.array_equal(np.round(samples * 32768).astype("<i2"), pcm)
    mp3, rate = decode(speech("mp3"))
    assert rate == RATE and len(pcm) <= len(mp3) <= len(pcm) + 2 * 1152
    low = np.frombuffer(speech("pcm", sample_rate=16_000), "<i2")
    assert abs(len(low) - len(pcm) * 2 / 3) <= 16


async def test_vllm_omni_socket(server: RunningServer) -> None:
    audio = await vllm_session(server, {"voice": "default", "options": GREEDY}, TEXT)
    assert audio[:4] == b"RIFF"
    samples = np.frombuffer(audio[44:], "<i2")
    assert int.from_bytes(audio[24:28], "little") == RATE
    assert len(samples) > 0 and len(samples) % FRAME == 0 and np.abs(samples).max() > 100
    second = await vllm_session(server, {"voice": "second", "options": GREEDY}, TEXT)
    assert second != audio


# -- voices -----------------------------------------------------------------------------


async def test_the_second_voice_differs(server: RunningServer) -> None:
    default = await whole(server, voice="default", options=GREEDY)
    second = await whole(server, voice="second", options=GREEDY)
    assert not np.array_equal(default[: len(second)], second[: len(default)])


async def test_a_clone_inline_and_stored_speaks_on_every_endpoint(server: RunningServer) -> None:
    """``ref_audio`` on the socket and over HTTP, and the same audio uploaded once
    (``POST /v1/audio/voices``) and named on the socket, over HTTP and on the
    vllm-omni socket: the same voice everywhere, not the default one."""
    inline = await whole(server, voice="clone", ref_audio=REF_B64, options=GREEDY)
    default = await whole(server, options=GREEDY)
    assert not np.array_equal(inline[: len(default)], default[: len(inline)])
    body = {"input": TEXT, "response_format": "pcm", "options": GREEDY}
    async with httpx.AsyncClient(base_url=server.http, timeout=60) as http:
        cloned = await http.post(
            "/v1/audio/speech", json={**body, "voice": "clone", "ref_audio": REF_B64}
        )
        assert cloned.status_code == 200, cloned.text
        assert np.array_equal(np.frombuffer(cloned.content, "<i2"), inline)
        files = {"audio_sample": ("ref.wav", REF, "audio/wav")}
        created = await http.post("/v1/audio/voices", data={"name": "Narrator"}, files=files)
        assert created.status_code == 200, created.text
        listing = (await http.get("/v1/audio/voices")).json()
        assert {"Narrator", "clone", "default", "second"} <= set(listing["voices"])
        named = await http.post("/v1/audio/speech", json={**body, "voice": "Narrator"})
        assert named.status_code == 200, named.text
        assert np.array_equal(np.frombuffer(named.content, "<i2"), inline)
    assert np.array_equal(await whole(server, voice="Narrator", options=GREEDY), inline)
    by_name = await vllm_session(server, {"voice": "Narrator", "options": GREEDY}, TEXT)
    base = {"task_type": "Base", "ref_audio": REF_B64, "options": GREEDY}
    assert await vllm_session(server, base, TEXT) == by_name
    plain = await vllm_session(server, {"voice": "default", "options": GREEDY}, TEXT)
    assert by_name[:4] == b"RIFF" and by_name != plain


# -- the speaking rate and bad input ----------------------------------------------------


async def test_speaking_rate_in_range_and_out(server: RunningServer) -> None:
    """In range (2 to 6 syllables a second) the rate steers the pace: slow speech
    is longer than fast speech, both differ from the voice's own pace. Out of range
    is refused naming the field and its range; the socket goes on."""
    own = await whole(server, options=GREEDY)
    slow = await whole(server, options={**GREEDY, "speaking_rate": 2})
    fast = await whole(server, options={**GREEDY, "speaking_rate": 6})
    assert len(slow) > len(fast)
    for paced in (slow, fast):
        assert not np.array_equal(paced[: len(own)], own[: len(paced)])
    client = await Client.connect(server.ws)
    for i, rate in enumerate((9, 0.5)):
        error = await refused(client, f"r{i}", options={**GREEDY, "speaking_rate": rate})
        assert error["code"] == "invalid_field" and error["param"] == "speaking_rate"
        assert "from 2 to 6" in error["message"], error
        await still_speaks(client, f"ok{i}")
    await client.close()
    async with httpx.AsyncClient(base_url=server.http, timeout=60) as http:
        body = {"input": TEXT, "response_format": "pcm", "options": {"speaking_rate": 9}}
        response = await http.post("/v1/audio/speech", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "speaking_rate" and "from 2 to 6" in error["message"]


async def test_text_with_nothing_to_say(server: RunningServer) -> None:
    """Emoji and symbols alone are nothing to say: no audio, and the context is done
    (the same over HTTP: an empty body). A word of letters or digits the phonemizer
    cannot read is refused naming ``text`` and the word; the socket goes on."""
    audio, done, _ = await speak(server, ["🙂🙂 ✨"], options=GREEDY)
    assert audio == b"" and done["audio_ms"] == 0 and done["usage"]["frames"] == 0
    emoji = await whole(server, "Hello 🙂 there.", options=GREEDY)
    assert np.array_equal(emoji, await whole(server, "Hello there.", options=GREEDY))
    client = await Client.connect(server.ws)
    await client.send(type="context.create", context_id="digit", options=GREEDY)
    await client.send(type="text.append", context_id="digit", text="Count ① now.")
    await client.send(type="context.end", context_id="digit")
    error = await client.until("error", timeout=60)
    assert error["code"] == "invalid_field" and error["param"] == "text"
    assert "①" in error["message"] and error["context_id"] == "digit"
    await client.until("context.cancelled", "digit")
    await still_speaks(client, "after")
    await client.close()
    async with httpx.AsyncClient(base_url=server.http, timeout=60) as http:
        body = {"input": "🙂 ✨", "response_format": "pcm"}
        empty = await http.post("/v1/audio/speech", json=body)
        assert empty.status_code == 200 and empty.content == b""
        bad = await http.post("/v1/audio/speech", json={**body, "input": "Count ① now."})
    assert bad.status_code == 400 and bad.json()["error"]["param"] in ("input", "text")


async def test_bad_requests_name_the_field_and_the_socket_goes_on(
    server: RunningServer,
) -> None:
    client = await Client.connect(server.ws)
    error = await refused(client, "v", voice="nobody")
    assert error["code"] == "unknown_voice" and error["param"] == "voice"
    assert "default, second, clone" in error["message"]
    await still_speaks(client, "ok-v")
    error = await refused(client, "t", options={"temperature": 0})
    assert error["code"] == "invalid_field" and error["param"] == "temperature"
    assert "over 0" in error["message"]
    await still_speaks(client, "ok-t")
    error = await refused(client, "c", voice="clone")
    assert error["code"] == "missing_field" and error["param"] == "ref_audio"
    await still_speaks(client, "ok-c")
    bad_audio = {
        "short": (wav_file(0.5), "too short"),
        "silent": (wav_file(2.0, silent=True), "silent"),
        "junk": (b"not audio at all, only bytes", "not decodable"),
    }
    for cid, (data, says) in bad_audio.items():
        ref = base64.b64encode(data).decode()
        error = await refused(client, cid, voice="clone", ref_audio=ref)
        assert error["code"] == "invalid_field" and error["param"] == "ref_audio"
        assert says in error["message"], error
        await still_speaks(client, f"ok-{cid}")
    await client.close()
    async with httpx.AsyncClient(base_url=server.http, timeout=60) as http:
        junk = base64.b64encode(b"not audio at all").decode()
        body = {"input": TEXT, "voice": "clone", "ref_audio": junk, "response_format": "pcm"}
        response = await http.post("/v1/audio/speech", json=body)
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "ref_audio"
        body = {"input": TEXT, "response_format": "pcm", "options": {"temperature": 0}}
        response = await http.post("/v1/audio/speech", json=body)
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "temperature"
