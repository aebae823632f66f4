"""The vllm-omni compatible WebSocket over real sockets, driven by a client written only
for vllm-omni's message set (plain ``websockets``, JSON and raw binary frames)."""

from __future__ import annotations

import asyncio
import io
import json
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import av
import numpy as np
import pytest
import websockets

from tests.e2e.conftest import TEST_LIMITS
from tests.serving import RunningServer, run_server
from tests.wsclient import Client
from voiceserver.config import Limits, ServerConfig, load_model_config

TINY_RATE = 16000
TINY_FRAME = 320  # samples per tiny frame: one per input byte, plus 3 tail frames
OUT_RATE = 24000  # the socket's rate unless sample_rate picks another


def tiny_samples(text: str, rate: int = TINY_RATE) -> int:
    """Samples of tiny's audio for ``text`` at ``rate`` (its frames resample exactly)."""
    return (len(text.encode()) + 3) * TINY_FRAME * rate // TINY_RATE


def compat_url(server: RunningServer) -> str:
    return f"ws://{server.host}:{server.port}/v1/audio/speech/stream"


@dataclass
class Sentence:
    start: dict[str, Any]
    audio: list[bytes] = field(default_factory=list)
    done: dict[str, Any] | None = None

    @property
    def data(self) -> bytes:
        return b"".join(self.audio)


@dataclass
class Utterance:
    sentences: list[Sentence]
    done: dict[str, Any]
    errors: list[dict[str, Any]]


class VllmClient:
    """What a vllm-omni client does: JSON messages in, audio.start/binary/audio.done out."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws

    @classmethod
    async def connect(cls, server: RunningServer, **kwargs: Any) -> VllmClient:
        return cls(await websockets.connect(compat_url(server), max_size=None, **kwargs))

    async def send(self, **msg: Any) -> None:
        await self.ws.send(json.dumps(msg))

    async def recv(self, timeout: float = 30) -> dict[str, Any] | bytes:
        data = await asyncio.wait_for(self.ws.recv(), timeout)
        return data if isinstance(data, bytes) else json.loads(data)

    async def next_message(self, timeout: float = 30) -> dict[str, Any]:
        data = await self.recv(timeout)
        assert isinstance(data, dict), "unexpected audio"
        return data

    async def read_sentence(self) -> Sentence:
        """One audio.start .. audio.done group (no other message may interleave)."""
        start = await self.next_message()
        assert start["type"] == "audio.start", start
        sentence = Sentence(start)
        while True:
            data = await self.recv()
            if isinstance(data, bytes):
                sentence.audio.append(data)
            elif data["type"] == "audio.done":
                sentence.done = data
                return sentence
            else:
                assert data["type"] == "error", data

    async def read_utterance(self) -> Utterance:
        """Everything up to session.done, checking the pairing on the way."""
        sentences: list[Sentence] = []
        errors: list[dict[str, Any]] = []
        current: Sentence | None = None
        while True:
            data = await self.recv()
            if isinstance(data, bytes):
                assert current is not None, "audio outside audio.start/audio.done"
                current.audio.append(data)
            elif data["type"] == "audio.start":
                assert current is None, data
                current = Sentence(data)
            elif data["type"] == "audio.done":
                assert current is not None, data
                current.done = data
                sentences.append(current)
                current = None
            elif data["type"] == "error":
                errors.append(data)
            else:
                assert data["type"] == "session.done", data
                assert current is None
                return Utterance(sentences, data, errors)

    async def speak(self, pieces: list[str]) -> Utterance:
        for piece in pieces:
            await self.send(type="input.text", text=piece)
        await self.send(type="input.done")
        return await self.read_utterance()

    async def closed_code(self, timeout: float = 10) -> int | None:
        """Read until the server closes; the close code it sent."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    await self.ws.recv()
        except websockets.ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd is not None else None

    async def close(self) -> None:
        await self.ws.close()


def parse_wav(data: bytes) -> tuple[int, bytes]:
    riff, _, wave, fmt, _, tag, channels, rate, _, _, bits, chunk, size = struct.unpack(
        "<4sI4s4sIHHIIHH4sI", data[:44]
    )
    assert (riff, wave, fmt, chunk) == (b"RIFF", b"WAVE", b"fmt ", b"data")
    assert (tag, channels, bits) == (1, 1, 16)
    if size != 0xFFFFFFFF:
        assert size == len(data) - 44
    return rate, data[44:]


def decode_file(data: bytes) -> tuple[int, np.ndarray]:
    with av.open(io.BytesIO(data)) as container:
        rate = container.streams.audio[0].rate
        pcm = [frame.to_ndarray().reshape(-1) for frame in container.decode(audio=0)]
    return rate, np.concatenate(pcm)


async def native_pcm(server: RunningServer, pieces: list[list[str]], rate: int) -> bytes:
    """The native endpoint's s16le audio for one context, each inner list flushed apart."""
    client = await Client.connect(server.ws)
    fmt = {"encoding": "pcm_s16le", "sample_rate": rate}
    await client.send(
        type="context.create", context_id="n", output_format=fmt, buffer={"mode": "manual"}
    )
    for i, group in enumerate(pieces):
        for piece in group:
            await client.send(type="text.append", context_id="n", text=piece)
        if i < len(pieces) - 1:
            await client.send(type="context.flush", context_id="n")
    await client.send(type="context.end", context_id="n")
    await client.until("context.done", "n")
    await client.close()
    return bytes(client.got.audio["n"])


# -- the happy path -----------------------------------------------------------


async def test_no_split_gets_one_wav_per_utterance(tiny_server: RunningServer) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", split_granularity="none")
    pieces = ["Hello ", "world. ", "How are ", "you?"]
    utt = await client.speak(pieces)
    text = "".join(pieces)
    assert utt.done == {"type": "session.done", "utterance_index": 0, "total_sentences": 1}
    [sentence] = utt.sentences
    assert sentence.start == {
        "type": "audio.start",
        "utterance_index": 0,
        "sentence_index": 0,
        "sentence_text": text,
        "format": "wav",
        "sample_rate": OUT_RATE,
        "channels": 1,
    }
    assert len(sentence.audio) == 1  # the whole sentence as one file
    assert sentence.done == {
        "type": "audio.done",
        "utterance_index": 0,
        "sentence_index": 0,
        "total_bytes": len(sentence.data),
        "error": False,
    }
    rate, pcm = parse_wav(sentence.data)
    assert rate == OUT_RATE and len(pcm) == 2 * tiny_samples(text, OUT_RATE)
    # The same engine and model as the native endpoint: the very same samples.
    assert pcm == await native_pcm(tiny_server, [[text]], OUT_RATE)

    # input.done does not close: the next utterance reuses the connection.
    utt = await client.speak(["Again."])
    assert utt.done["utterance_index"] == 1 and utt.done["total_sentences"] == 1
    assert utt.sentences[0].start["utterance_index"] == 1
    assert utt.sentences[0].start["sentence_index"] == 0

    await client.send(type="session.close")
    assert await client.closed_code() == 1000


async def test_session_close_answers_everything_first(tiny_server: RunningServer) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="pcm", split_granularity="sentence")
    await client.send(type="input.text", text="First one. Second one. Third")
    await client.send(type="input.done")
    await client.send(type="session.close")
    utt = await client.read_utterance()
    assert [s.start["sentence_text"] for s in utt.sentences] == [
        "First one.",
        "Second one.",
        "Third",
    ]
    assert [len(s.data) for s in utt.sentences] == [
        2 * tiny_samples(t, OUT_RATE) for t in ("First one.", "Second one.", "Third")
    ]
    assert await client.closed_code() == 1000


async def test_empty_utterance_has_no_sentences(tiny_server: RunningServer) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config")
    utt = await client.speak(["", "   "])
    assert utt.sentences == [] and utt.done["total_sentences"] == 0
    await client.close()


# -- split_granularity -------------------------------------------------------


SPLIT_TEXT = "Well, I think so, yes. Fine then! Bye"


@pytest.mark.parametrize(
    ("granularity", "early", "expected"),
    [
        ("none", 0, [SPLIT_TEXT]),
        ("sentence", 2, ["Well, I think so, yes.", "Fine then!", "Bye"]),
        # Clauses as the native endpoint cuts them: the first once 12 characters long.
        ("clause", 3, ["Well, I think so,", "yes.", "Fine then!", "Bye"]),
    ],
)
async def test_split_granularity(
    tiny_server: RunningServer, granularity: str, early: int, expected: list[str]
) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="pcm", split_granularity=granularity)
    words = SPLIT_TEXT.split(" ")
    for i, word in enumerate(words):
        await client.send(type="input.text", text=word if i == 0 else " " + word)
    # Sentences complete before input.done are spoken before it.
    for index in range(early):
        sentence = await client.read_sentence()
        assert sentence.start["sentence_index"] == index
        assert sentence.start["sentence_text"] == expected[index]
    await client.send(type="input.done")
    utt = await client.read_utterance()
    sentences = utt.sentences
    assert [s.start["sentence_text"] for s in sentences] == expected[early:]
    assert [s.start["sentence_index"] for s in sentences] == list(range(early, len(expected)))
    assert all(s.start["utterance_index"] == 0 for s in sentences)
    for sentence in sentences:
        assert len(sentence.data) == 2 * tiny_samples(sentence.start["sentence_text"], OUT_RATE)
        assert sentence.done is not None and sentence.done["total_bytes"] == len(sentence.data)
    assert utt.done["total_sentences"] == len(expected)
    await client.close()


# -- formats ---------------------------------------------------------------------


async def test_stream_audio_pcm_announces_rate(tiny_server: RunningServer) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(
        type="session.config", response_format="pcm", stream_audio=True, split_granularity="none"
    )
    text = "A longer sentence, so that the audio arrives in several chunks."
    utt = await client.speak([text])
    [sentence] = utt.sentences
    assert sentence.start["sample_rate"] == OUT_RATE and sentence.start["channels"] == 1
    assert len(sentence.audio) > 1
    assert sentence.done is not None and sentence.done["total_bytes"] == len(sentence.data)
    assert sentence.data == await native_pcm(tiny_server, [[text]], OUT_RATE)
    await client.close()


async def test_stream_audio_wav_is_one_open_ended_file(tiny_server: RunningServer) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="wav", stream_audio=True)
    text = "Streamed as a WAV file."
    [sentence] = (await client.speak([text])).sentences
    assert sentence.start["sample_rate"] == OUT_RATE
    assert struct.unpack("<I", sentence.data[40:44])[0] == 0xFFFFFFFF
    rate, pcm = parse_wav(sentence.data)
    assert rate == OUT_RATE and len(pcm) == 2 * tiny_samples(text, OUT_RATE)
    await client.close()


@pytest.mark.parametrize(
    ("fmt", "magic", "rate"),
    [("flac", b"fLaC", OUT_RATE), ("mp3", b"ID3", OUT_RATE), ("opus", b"OggS", 48000)],
)
async def test_file_formats(tiny_server: RunningServer, fmt: str, magic: bytes, rate: int) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format=fmt)
    text = "Files of every kind."
    [sentence] = (await client.speak([text])).sentences
    assert sentence.start["format"] == fmt and len(sentence.audio) == 1
    assert sentence.start["sample_rate"] == OUT_RATE
    assert sentence.data.startswith(magic)
    decoded_rate, pcm = decode_file(sentence.data)
    assert decoded_rate == rate
    expected = tiny_samples(text) * rate // TINY_RATE
    tolerance = 0 if fmt == "flac" else rate // 50  # lossy codecs may pad a frame
    assert abs(len(pcm) - expected) <= tolerance
    await client.close()


# -- bad input -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("{not json", "invalid_json"),
        ('{"type": "input.text", "text": "too early"}', "Expected session.config, got: input.text"),
        ('{"type": "input.done"}', "Expected session.config"),
        ('{"type": "no.such"}', "unknown_type"),
        ('{"type": "session.config", "speed": 9}', "Invalid session config"),
        ('{"type": "session.config", "response_format": "ogg"}', "Invalid session config"),
        ('{"type": "session.config", "split_granularity": "word"}', "Invalid session config"),
        ('{"type": "session.config", "voice": "nobody"}', "unknown_voice"),
        ('{"type": "session.config", "model": "gpt-9"}', "unknown_model"),
    ],
)
async def test_bad_first_message_errors_and_closes(
    tiny_server: RunningServer, raw: str, says: str
) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.ws.send(raw)
    error = await client.next_message()
    assert error["type"] == "error" and says in error["message"], error
    assert set(error) == {"type", "message"}
    assert await client.closed_code() == 1008


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("{not json", "invalid_json"),
        ("[1, 2]", "invalid_json"),
        ('{"type": "no.such"}', "unknown_type"),
        ('{"text": "no type"}', "unknown_type"),
        ('{"type": "input.text", "text": 5}', "invalid_field"),
        (b"\x00\x01", "binary frames are not accepted"),
        ('{"type": "session.config", "speed": "fast"}', "Invalid session config"),
        ('{"type": "session.config", "voice": "nobody"}', "Invalid session config: unknown_voice"),
        (
            '{"type": "session.config", "word_timestamps": true, "response_format": "wav"}',
            "word_timestamps: word timestamps come in audio.chunk messages of raw PCM; set"
            ' response_format to "pcm"',
        ),
        (
            '{"type": "session.config", "sample_rate": 11025}',
            "sample_rate: 11025 Hz is not offered for wav; allowed: 8000, 16000, 22050, 24000,"
            " 44100, 48000",
        ),
        (
            '{"type": "session.config", "stream_audio": true, "response_format": "mp3"}',
            "cannot be streamed",
        ),
    ],
)
async def test_bad_message_after_config_keeps_session(
    tiny_server: RunningServer, raw: str | bytes, says: str
) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="pcm")
    await client.ws.send(raw)
    error = await client.next_message()
    assert error["type"] == "error" and says in error["message"], error
    # The session and its config (pcm, not a refused replacement) still work.
    utt = await client.speak(["Still here."])
    assert utt.sentences[0].start["format"] == "pcm"
    assert len(utt.sentences[0].data) == 2 * tiny_samples("Still here.", OUT_RATE)
    await client.close()


async def test_config_refused_while_an_utterance_is_open(tiny_server: RunningServer) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="pcm")
    await client.send(type="input.text", text="Half of it")
    await client.send(type="session.config", response_format="wav")
    error = await client.next_message()
    assert error["type"] == "error" and "send input.done first" in error["message"]
    utt = await client.speak([" and the rest."])
    assert utt.sentences[0].start["sentence_text"] == "Half of it and the rest."
    assert utt.sentences[0].start["format"] == "pcm"
    # Between utterances a new config applies.
    await client.send(type="session.config", response_format="wav")
    utt = await client.speak(["Now wav."])
    assert utt.sentences[0].start["format"] == "wav"
    await client.close()


async def test_text_over_the_limit(tiny_server: RunningServer) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="pcm")
    await client.send(type="input.text", text="x" * (TEST_LIMITS.max_text_chars + 1))
    error = await client.next_message()
    assert error["type"] == "error" and "text_too_long" in error["message"]
    utt = await client.speak(["Short."])
    assert utt.sentences[0].start["sentence_text"] == "Short."
    await client.close()


# -- engine slots ------------------------------------------------------------------


async def wait_for_no_contexts(server: RunningServer, timeout: float = 5) -> None:
    engine = server.runtime.engine
    deadline = time.monotonic() + timeout
    while engine.snapshot().active_contexts and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert engine.snapshot().active_contexts == 0


async def test_closing_mid_stream_frees_the_engine_slot(tiny_server: RunningServer) -> None:
    await wait_for_no_contexts(tiny_server)
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="pcm", stream_audio=True)
    # About 38 s of audio: more than the engine runs ahead of playout, so the
    # context is still alive when the socket goes.
    await client.send(type="input.text", text="word " * 380)
    await client.send(type="input.done")
    assert isinstance(await client.recv(), dict)  # audio.start
    assert isinstance(await client.recv(), bytes)
    assert tiny_server.runtime.engine.snapshot().active_contexts == 1
    await client.close()
    await wait_for_no_contexts(tiny_server)


async def test_closing_with_sentences_queued(tiny_server: RunningServer) -> None:
    await wait_for_no_contexts(tiny_server)
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", split_granularity="sentence")
    await client.send(type="input.text", text="One. Two. Three. Four. Five. Six")
    await client.send(type="input.done")
    await client.close()
    await wait_for_no_contexts(tiny_server)
    # The server is unharmed.
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config")
    assert len((await client.speak(["Fine."])).sentences) == 1
    await client.close()


# -- a server of its own: auth and idle timeout ---------------------------------------


@pytest.fixture(scope="module")
def strict_server() -> Iterator[RunningServer]:
    config = ServerConfig(api_keys=("sekrit",), limits=Limits(idle_timeout_s=0.4))
    with run_server(load_model_config("tiny"), config) as server:
        yield server


async def test_unauthorized_without_key(strict_server: RunningServer) -> None:
    with pytest.raises(websockets.InvalidStatus) as denied:
        await VllmClient.connect(strict_server)
    assert denied.value.response.status_code == 401
    client = await VllmClient.connect(
        strict_server, additional_headers={"Authorization": "Bearer sekrit"}
    )
    await client.send(type="session.config")
    utt = await client.speak(["Authorized."])
    assert len(utt.sentences) == 1
    # Idle after the utterance: an error, then the socket closes.
    error = await client.next_message(timeout=5)
    assert error == {"type": "error", "message": "Idle timeout: no message received"}
    assert await client.closed_code() == 4008


# -- real speech ---------------------------------------------------------------------

PIPER_RATE = 22050
PIPER_TEXT = "Hello there, how are you today? I hope the weather is fine where you are."


@pytest.fixture(scope="module")
def piper_server() -> Iterator[RunningServer]:
    config = load_model_config("piper-joe", {"noise_scale": 0, "noise_w_scale": 0})
    with run_server(config, ServerConfig()) as server:
        yield server


def as_float(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, np.int16).astype(np.float32) / 32767.0


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    noise = np.sum((reference - test) ** 2)
    return float(10 * np.log10(np.sum(reference**2) / max(noise, 1e-30)))


async def test_piper_whole_utterance_equals_native(piper_server: RunningServer) -> None:
    client = await VllmClient.connect(piper_server)
    await client.send(type="session.config", split_granularity="none")
    words = PIPER_TEXT.split(" ")
    utt = await client.speak([words[0]] + [" " + word for word in words[1:]])
    await client.close()
    [sentence] = utt.sentences
    assert sentence.start["sentence_text"] == PIPER_TEXT
    rate, pcm = parse_wav(sentence.data)
    assert rate == sentence.start["sample_rate"] == OUT_RATE  # Piper's own is 22,050
    reference = as_float(await native_pcm(piper_server, [[PIPER_TEXT]], rate))
    got = as_float(pcm)
    assert len(got) == len(reference) > rate  # more than a second of speech
    assert snr_db(reference, got) >= 60.0


async def test_piper_streamed_sentences_equal_native_flushes(
    piper_server: RunningServer,
) -> None:
    client = await VllmClient.connect(piper_server)
    await client.send(
        type="session.config",
        response_format="pcm",
        stream_audio=True,
        split_granularity="sentence",
        # Piper's own rate, so no resampler restarts between the sentences.
        sample_rate=PIPER_RATE,
    )
    utt = await client.speak([PIPER_TEXT])
    await client.close()
    first, second = "Hello there, how are you today?", "I hope the weather is fine where you are."
    assert [s.start["sentence_text"] for s in utt.sentences] == [first, second]
    assert all(s.start["sample_rate"] == PIPER_RATE for s in utt.sentences)
    got = as_float(b"".join(s.data for s in utt.sentences))
    reference = as_float(await native_pcm(piper_server, [[first], [" " + second]], PIPER_RATE))
    assert len(got) == len(reference)
    assert snr_db(reference, got) >= 60.0
