"""ElevenLabs' text-to-speech sockets over real sockets, spoken the way ElevenLabs' docs
show them (plain ``websockets`` and JSON), against the server on Piper: alignment that
adds up to the audio, contexts, flush and close, every output format decoded by
FFmpeg, and hostile input refused clearly while a bystander is served in full."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from collections import defaultdict
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import av
import httpx
import numpy as np
import pytest
import websockets

from tests.clients.elevenlabs_piper import (
    KEY,
    LIMITS,
    VOICE,
    aligned_text,
    chunk_spans,
    engine_contexts,
    piper_server,
    wait_for_no_contexts,
)
from tests.serving import RunningServer

TEXT = "Hello World. How are you today? "


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with piper_server() as running:
        yield running


class ElevenLabsSocket:
    """What an ElevenLabs client does: JSON messages in, JSON messages out."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.by_context: dict[str | None, list[dict[str, Any]]] = defaultdict(list)

    @classmethod
    async def open(
        cls,
        server: RunningServer,
        endpoint: str = "multi-stream-input",
        voice: str = VOICE,
        key: str | None = KEY,
        **query: Any,
    ) -> ElevenLabsSocket:
        query = {k: str(v).lower() if isinstance(v, bool) else v for k, v in query.items()}
        url = f"ws://{server.host}:{server.port}/v1/text-to-speech/{voice}/{endpoint}"
        if query:
            url += "?" + urlencode(query)
        headers = {"xi-api-key": key} if key is not None else {}
        return cls(await websockets.connect(url, additional_headers=headers, max_size=None))

    async def send(self, **msg: Any) -> None:
        await self.ws.send(json.dumps(msg))

    async def recv(self, timeout: float = 30) -> dict[str, Any]:
        message = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        self.by_context[message.get("contextId")].append(message)
        return message

    async def until_final(self, context: str | None = None) -> list[dict[str, Any]]:
        """Every message of ``context`` up to its isFinal (others are kept for later)."""
        while not any(m.get("isFinal") for m in self.by_context[context]):
            await self.recv()
        return self.by_context.pop(context)

    async def rest(self) -> tuple[list[dict[str, Any]], int | None, str]:
        """Everything until the server closes the socket, and how it closed."""
        got: list[dict[str, Any]] = []
        try:
            while True:
                got.append(await self.recv())
        except websockets.ConnectionClosed:
            pass
        assert self.ws.close_code is not None
        return got, self.ws.close_code, self.ws.close_reason or ""

    async def close(self) -> None:
        await self.ws.close()


def audio_of(messages: list[dict[str, Any]]) -> bytes:
    return b"".join(base64.b64decode(m["audio"]) for m in messages if m.get("audio"))


def check_alignment(messages: list[dict[str, Any]], rate: int, width: int = 2) -> None:
    """Each aligned message's span ends exactly where the audio sent so far ends."""
    clock = samples = 0
    for message in messages:
        samples += len(base64.b64decode(message.get("audio") or "")) // width
        alignment = message.get("alignment")
        if not alignment:
            continue
        assert alignment == message["normalizedAlignment"]
        starts, durations = alignment["charStartTimesMs"], alignment["charDurationsMs"]
        assert len(starts) == len(durations) == len(alignment["chars"])
        assert starts == sorted(starts) and min(starts) >= 0 and min(durations) >= 0
        clock += starts[-1] + durations[-1]
        assert clock == samples * 1000 // rate


def decode(data: bytes, fmt: str | None = None, rate: int | None = None) -> tuple[np.ndarray, int]:
    """Decode with FFmpeg (PyAV): the samples and their rate."""
    options = {"sample_rate": str(rate), "ac": "1"} if rate else {}
    with av.open(io.BytesIO(data), format=fmt, options=options) as container:
        frames = [frame.to_ndarray().reshape(-1) for frame in container.decode(audio=0)]
        out_rate = container.streams.audio[0].rate
    return np.concatenate(frames), out_rate


# --- speaking as the docs show it ------------------------------------------------------


async def test_stream_input_as_the_docs_show_it(server: RunningServer) -> None:
    sock = await ElevenLabsSocket.open(
        server, "stream-input", model_id="eleven_flash_v2_5", output_format="pcm_22050"
    )
    await sock.send(
        text=" ",
        voice_settings={"stability": 0.5, "similarity_boost": 0.8, "speed": 1.0},
        generation_config={"chunk_length_schedule": [120, 160, 250, 290]},
        xi_api_key=KEY,
    )
    await sock.send(text="Hello World. ", try_trigger_generation=True)
    await sock.send(text="How are you today? ")
    await sock.send(text="")
    messages, code, _ = await sock.rest()
    assert code == 1000
    assert messages[-1] == {"isFinal": True}
    audio = messages[:-1]
    assert all(set(m) <= {"audio", "alignment", "normalizedAlignment"} for m in audio)
    pcm = audio_of(audio)
    assert len(pcm) / 2 / 22050 > 1.0
    assert aligned_text(audio) == TEXT
    check_alignment(audio, 22050)
    assert await wait_for_no_contexts(server) == 0


async def test_contexts_flush_and_close_on_one_socket(server: RunningServer) -> None:
    sock = await ElevenLabsSocket.open(server, output_format="pcm_16000")
    await sock.send(text=" ", voice_settings={"stability": 0.5}, context_id="a")
    await sock.send(text=" ", context_id="b")
    await sock.send(text="", context_id="a")  # a keepalive of a context
    await sock.send(text="")  # and of the socket
    await sock.send(text="First context speaks. ", context_id="a")
    await sock.send(text="The second one ", contextId="b")
    await sock.send(text="speaks too. ", context_id="b", flush=True)
    await sock.send(context_id="a", flush=True)
    await sock.send(context_id="a", close_context=True)
    await sock.send(context_id="b", close_context=True)
    for context, text in (("a", "First context speaks. "), ("b", "The second one speaks too. ")):
        messages = await sock.until_final(context)
        assert all(m["contextId"] == context for m in messages)
        assert messages[-1] == {"isFinal": True, "contextId": context}
        assert aligned_text(messages) == text
        check_alignment(messages[:-1], 16000)
    # A closed id opens a new context, as on ElevenLabs.
    await sock.send(text="Again. ", context_id="a", flush=True)
    await sock.send(context_id="a", close_context=True)
    again = await sock.until_final("a")
    assert aligned_text(again) == "Again. " and audio_of(again)
    assert not sock.by_context  # nothing else was said (no errors)
    await sock.send(close_socket=True)
    assert (await sock.rest())[1] == 1000


async def test_close_without_flush_is_barge_in(server: RunningServer) -> None:
    sock = await ElevenLabsSocket.open(server, output_format="pcm_16000")
    long_text = "This reply goes on and on, long enough to be cut off midway. " * 8
    await sock.send(text=" ", context_id="talk")
    await sock.send(text=long_text, context_id="talk")  # the agent is still writing
    first = await sock.recv()
    assert first.get("audio") and first["contextId"] == "talk"
    await sock.send(context_id="talk", close_context=True)
    messages = await sock.until_final("talk")
    assert messages[-1] == {"isFinal": True, "contextId": "talk"}
    spoken = len(audio_of([first, *messages])) / 2 / 16000
    assert 0 < spoken < 10  # the whole text is half a minute of speech
    assert await wait_for_no_contexts(server) == 0
    await sock.close()


async def test_sync_alignment_counts_from_the_context_start(server: RunningServer) -> None:
    sock = await ElevenLabsSocket.open(server, output_format="pcm_24000", sync_alignment=True)
    await sock.send(text=TEXT, context_id="c", flush=True)
    await sock.send(context_id="c", close_context=True)
    messages = await sock.until_final("c")
    samples = 0
    last_start = 0
    for message in messages:
        samples += len(base64.b64decode(message.get("audio") or "")) // 2
        alignment = message.get("alignment")
        if alignment:
            starts = alignment["charStartTimesMs"]
            assert starts[0] >= last_start and starts == sorted(starts)
            last_start = starts[-1]
            assert starts[-1] + alignment["charDurationsMs"][-1] == samples * 1000 // 24000
    assert aligned_text(messages) == TEXT
    await sock.close()


async def test_voice_settings_speed_applies_to_its_context(server: RunningServer) -> None:
    sock = await ElevenLabsSocket.open(server, output_format="pcm_16000")
    for context, speed in (("normal", 1.0), ("fast", 1.25)):
        settings = {"stability": 0.5, "similarity_boost": 0.75, "speed": speed}
        await sock.send(text=" ", voice_settings=settings, context_id=context)
        await sock.send(text=SHORT, context_id=context, flush=True)
        await sock.send(context_id=context, close_context=True)
    normal = len(audio_of(await sock.until_final("normal")))
    fast = len(audio_of(await sock.until_final("fast")))
    assert 0.75 < fast / normal < 0.85
    await sock.close()


async def test_ssml_tags_are_taken_out_when_parsing_is_on(server: RunningServer) -> None:
    sock = await ElevenLabsSocket.open(server, output_format="pcm_16000", enable_ssml_parsing=True)
    await sock.send(text='Wait <break time="1.0s" /> here. ', context_id="s", flush=True)
    await sock.send(context_id="s", close_context=True)
    assert aligned_text(await sock.until_final("s")) == "Wait  here. "
    await sock.close()


async def test_text_to_dialogue_socket(server: RunningServer) -> None:
    url = f"ws://{server.host}:{server.port}/v1/text-to-dialogue/multi-stream-input"
    url += "?model_id=eleven_v3&output_format=pcm_16000&sync_alignment=true"
    got: dict[str, list[dict[str, Any]]] = defaultdict(list)
    async with websockets.connect(url, additional_headers={"xi-api-key": KEY}) as ws:

        async def send(**msg: Any) -> None:
            await ws.send(json.dumps(msg))

        async def until_final(*contexts: str) -> None:
            while not all(any(m.get("is_final") for m in got[c]) for c in contexts):
                message = json.loads(await asyncio.wait_for(ws.recv(), 30))
                got[message["context_id"]].append(message)

        await send(context_id="d", voices=["JOE"], voice_settings={"stability": 0.5})
        await send(context_id="d", keep_alive=True)
        await send(context_id="d", inputs=[{"text": SHORT, "voice_id": "joe"}], flush=True)
        await send(context_id="d", close_context=True)
        await until_final("d")
        # One voice per context here: input in another voice is refused and stops it.
        await send(context_id="x", voices=["joe"])
        await send(context_id="x", inputs=[{"text": "Hi. ", "voice_id": "someone"}])
        await send(context_id="e", inputs=[{"text": "Hi. ", "voice_id": "nobody"}])
        await until_final("x", "e")
    *audio, final = got["d"]
    assert final == {"is_final": True, "context_id": "d"}
    text = "".join("".join(m["alignment"]["chars"]) for m in audio if m.get("alignment"))
    assert text == SHORT
    # Times count from each message's own first sample (LiveKit adds its audio's length).
    played = 0
    for message in audio:
        samples = len(base64.b64decode(message["audio"])) // 2
        alignment = message.get("alignment")
        if alignment:
            starts, durations = alignment["char_start_times_ms"], alignment["char_durations_ms"]
            assert starts == sorted(starts) and len(starts) == len(alignment["chars"])
            end = (played + samples) * 1000 // 16000 - played * 1000 // 16000
            assert starts[-1] + durations[-1] == end
        played += samples
    [error, final_x] = got["x"]
    assert error["error"] == "unsupported_value" and "someone" in error["message"]
    assert final_x == {"is_final": True, "context_id": "x"}
    [refused, final_e] = got["e"]
    assert refused["error"] == "voice_not_found" and final_e["is_final"] is True


# --- formats -------------------------------------------------------------------------------


SHORT = "Good morning, my friend. "
_spoken: dict[tuple[str, str], list[dict]] = {}


async def speak(server: RunningServer, output_format: str, text: str = SHORT) -> list[dict]:
    """The messages of ``text`` spoken in ``output_format`` (Piper is noise-free here: the
    same text is the same speech, so each is spoken once per module)."""
    if (output_format, text) in _spoken:
        return _spoken[output_format, text]
    sock = await ElevenLabsSocket.open(server, "stream-input", output_format=output_format)
    await sock.send(text=" ")
    await sock.send(text=text)
    await sock.send(text="")
    messages, code, _ = await sock.rest()
    assert code == 1000 and messages[-1] == {"isFinal": True}
    _spoken[output_format, text] = messages[:-1]
    return messages[:-1]


@pytest.mark.parametrize(
    ("output_format", "rate"),
    [("mp3_22050_32", 22050), ("mp3_44100_128", 44100), ("opus_48000_64", 48000)],
)
async def test_compressed_formats_decode_to_the_same_speech(
    server: RunningServer, output_format: str, rate: int
) -> None:
    reference = await speak(server, "pcm_24000")
    reference_s = len(audio_of(reference)) / 2 / 24000
    messages = await speak(server, output_format)
    samples, decoded_rate = decode(audio_of(messages))
    assert decoded_rate == rate
    # Ogg/Opus ends exactly; mp3's codec delay and padding make it a little longer.
    assert reference_s - 0.005 <= len(samples) / rate <= reference_s + 0.15
    assert aligned_text(messages) == SHORT
    spans_s = sum(chunk_spans(messages)) / 1000
    assert reference_s - 0.15 <= spans_s <= len(samples) / rate + 0.01


@pytest.mark.parametrize(("output_format", "fmt"), [("ulaw_8000", "mulaw"), ("alaw_8000", "alaw")])
async def test_g711_is_one_byte_a_sample(
    server: RunningServer, output_format: str, fmt: str
) -> None:
    reference = audio_of(await speak(server, "pcm_8000"))
    messages = await speak(server, output_format)
    data = audio_of(messages)
    assert len(data) == len(reference) // 2
    samples, rate = decode(data, fmt, 8000)
    assert rate == 8000 and len(samples) == len(data)
    expected = np.frombuffer(reference, "<i2").astype(np.float64)
    got = samples.astype(np.float64)
    error = np.sqrt(np.mean((got - expected) ** 2)) / np.sqrt(np.mean(expected**2))
    assert error < 0.1  # G.711's companding error, far below the speech
    check_alignment(messages, 8000, width=1)


# --- hostile input ---------------------------------------------------------------------------


async def bystander(server: RunningServer, done: asyncio.Event) -> int:
    """A well-behaved client speaking meanwhile: its audio's length in samples."""
    sock = await ElevenLabsSocket.open(server, output_format="pcm_16000")
    await sock.send(text=TEXT, context_id="calm", flush=True)
    await sock.send(context_id="calm", close_context=True)
    messages = await sock.until_final("calm")
    await done.wait()
    await sock.close()
    assert aligned_text(messages) == TEXT
    return len(audio_of(messages)) // 2


async def test_hostile_input_gets_clear_errors_and_harms_no_bystander(
    server: RunningServer,
) -> None:
    alone = await bystander(server, _set())
    done = asyncio.Event()
    calm = asyncio.create_task(bystander(server, done))
    sock = await ElevenLabsSocket.open(server, output_format="pcm_16000")

    await sock.send(text=" ", context_id="x")
    await sock.ws.send("{not json")
    error = await sock.recv()
    assert error["error"] == "invalid_json" and "contextId" not in error

    await sock.send(text="Hi ", context_id="x", bogus=1)
    error = await sock.recv()
    assert error["error"] == "invalid_field" and "`bogus`" in error["message"]
    assert "context_id" in error["message"] and error["contextId"] == "x"
    assert await sock.recv() == {"isFinal": True, "contextId": "x"}  # the context stopped

    await sock.send(text="Hi ", context_id="y", flush="yes")
    error = await sock.recv()
    assert error["error"] == "invalid_field" and "flush" in error["message"]
    assert error["contextId"] == "y"
    assert await sock.recv() == {"isFinal": True, "contextId": "y"}

    await sock.send(text="Hi ", context_id="v", voice_settings={"speed": 99})
    error = await sock.recv()
    assert error["error"] == "invalid_field" and "voice_settings.speed" in error["message"]
    await sock.recv()  # its isFinal

    await sock.ws.send(b"\x00\x01")
    assert (await sock.recv())["error"] == "binary_not_allowed"

    for _ in range(3):  # text beyond the context's limit, in pieces under the message size
        await sock.send(text="word " * (LIMITS.max_text_chars // 10), context_id="long")
    error = await sock.recv()
    while "error" not in error:
        error = await sock.recv()
    assert error["error"] == "text_too_long" and error["contextId"] == "long"
    await sock.until_final("long")

    # The socket still serves.
    await sock.send(text="Still here. ", context_id="ok", flush=True)
    await sock.send(context_id="ok", close_context=True)
    assert aligned_text(await sock.until_final("ok")) == "Still here. "

    await sock.send(text="x" * (LIMITS.max_message_bytes + 1), context_id="huge")
    messages, code, _ = await sock.rest()
    assert code == 1009 and messages[-1]["error"] == "message_too_big"

    done.set()
    assert await calm == alone
    assert await wait_for_no_contexts(server) == 0


def _set() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


async def test_single_socket_refusals_close_it(server: RunningServer) -> None:
    sock = await ElevenLabsSocket.open(server, "stream-input", output_format="pcm_16000")
    await sock.send(text=" ")
    await sock.ws.send("[1, 2")
    messages, code, _ = await sock.rest()
    assert code == 1008 and messages[-1]["error"] == "invalid_json"
    assert messages[-1]["code"] == 1008
    sock = await ElevenLabsSocket.open(server, "stream-input")
    await sock.send(text=" ", context_id="a")
    messages, code, _ = await sock.rest()
    assert code == 1008 and "multi-context socket" in messages[-1]["message"]


@pytest.mark.parametrize(
    ("endpoint", "voice", "query", "error", "named"),
    [
        ("stream-input", "nobody", {}, "voice_not_found", "'nobody'"),
        (
            "multi-stream-input",
            "joe",
            {"output_format": "mp3_8000_8"},
            "unsupported_value",
            "pcm_16000",
        ),
        (
            "multi-stream-input",
            "joe",
            {"model_id": "gpt-4o"},
            "model_not_found",
            "eleven_flash_v2_5",
        ),
        ("stream-input", "joe", {"bogus": "1"}, "invalid_field", "`bogus`"),
        ("stream-input", "joe", {"auto_mode": "maybe"}, "invalid_field", "`auto_mode`"),
    ],
)
async def test_bad_path_or_query_is_refused_naming_it(
    server: RunningServer, endpoint: str, voice: str, query: dict, error: str, named: str
) -> None:
    sock = await ElevenLabsSocket.open(server, endpoint, voice, **query)
    multi = endpoint == "multi-stream-input"
    # Told at the first message, about the context it opens.
    await sock.send(text=" ", **({"context_id": "first"} if multi else {}))
    messages, code, reason = await sock.rest()
    assert code == 1008 and reason
    [refusal] = messages
    assert refusal["error"] == error and named in refusal["message"] and refusal["code"] == 1008
    assert refusal.get("contextId") == ("first" if multi else None)


async def test_a_key_is_needed(server: RunningServer) -> None:
    with pytest.raises(websockets.InvalidStatus) as refused:
        await ElevenLabsSocket.open(server, key=None)
    assert refused.value.response.status_code == 401
    with pytest.raises(websockets.InvalidStatus):
        await ElevenLabsSocket.open(server, key="wrong")


async def test_http_client_leaving_frees_the_engine(server: RunningServer) -> None:
    text = "This reply goes on and on, long enough to take a while. " * 30
    url = f"{server.http}/v1/text-to-speech/{VOICE}/stream?output_format=pcm_16000"
    async with (
        httpx.AsyncClient(headers={"xi-api-key": KEY}) as http,
        http.stream("POST", url, json={"text": text}) as answer,
    ):
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "audio/pcm"
        first = await anext(answer.aiter_bytes())
        assert first and await engine_contexts(server) == 1
    # A minute of speech was asked for; the client left after its first bytes.
    assert await wait_for_no_contexts(server, seconds=2) == 0


async def test_inactivity_timeout_closes_an_idle_socket(server: RunningServer) -> None:
    sock = await ElevenLabsSocket.open(server, inactivity_timeout=0.3)
    messages, code, _ = await sock.rest()
    assert code == 4008 and messages[-1]["error"] == "idle_timeout"
