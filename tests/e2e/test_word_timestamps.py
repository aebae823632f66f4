"""Word timestamps over a real WebSocket with the native protocol.

The tiny model turns one input byte into one 20 ms frame, so its timings are
exact; Piper's come from its duration predictor. Both are checked against the
audio the client actually received, and against the text it sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import TEST_LIMITS
from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.serving import RunningServer, run_server
from tests.wsclient import Client
from voiceserver.config import (
    ServerConfig,
    config_for_checkpoint,
    load_model_config,
    with_checkpoint,
)

TINY_RATE = 16000
PIPER_RATE = 22050


@pytest.fixture(scope="module")
def tiny_server() -> Iterator[RunningServer]:
    with run_server(load_model_config("tiny"), ServerConfig(limits=TEST_LIMITS)) as server:
        yield server


@pytest.fixture(scope="module")
def piper_server() -> Iterator[RunningServer]:
    config = load_model_config("piper-joe", {"noise_scale": 0, "noise_w_scale": 0})
    with run_server(config, ServerConfig()) as server:
        yield server


def pcm(rate: int) -> dict[str, Any]:
    return {"encoding": "pcm_s16le", "sample_rate": rate}


def timeline(client: Client, context_id: str) -> list[tuple[dict[str, Any], int]]:
    """Every ``timestamps`` word of a context with the bytes of its audio received
    before the message carrying it."""
    got = client.got
    messages, frames = iter(got.messages), iter(got.frames)
    stream = got.streams[context_id]
    audio = 0
    out = []
    for kind, _ in got.order:
        if kind == "audio":
            frame = next(frames)
            if frame[0] == stream:
                audio += len(frame[3])
        else:
            msg = next(messages)
            if msg["type"] == "timestamps" and msg["context_id"] == context_id:
                out.extend((word, audio) for word in msg["words"])
    return out


def check_order(words: list[dict[str, Any]], audio_ms: float) -> None:
    for a, b in zip(words, words[1:], strict=False):
        assert a["start_ms"] <= b["start_ms"] and a["end_ms"] <= b["end_ms"], (a, b)
    for w in words:
        assert 0 <= w["start_ms"] <= w["end_ms"] <= audio_ms + 1, w


async def speak(
    server: RunningServer, text: str, pieces: list[str], rate: int, **create: Any
) -> tuple[Client, list[tuple[dict[str, Any], int]], float]:
    client = await Client.connect(server.ws)
    await client.send(type="context.create", context_id="c", output_format=pcm(rate), **create)
    for piece in pieces:
        await client.send(type="text.append", context_id="c", text=piece)
    assert "".join(pieces) == text
    await client.send(type="context.end", context_id="c")
    await client.until("context.done", "c")
    audio_ms = len(client.got.audio["c"]) / 2 / rate * 1000
    return client, timeline(client, "c"), audio_ms


async def test_tiny_words_are_exact_and_come_before_their_audio(tiny_server: RunningServer) -> None:
    text = "Hello there,  naïve wörld! It's   fine."
    # Streamed in pieces that cut words in half, as an LLM's tokens would.
    pieces = [text[i : i + 3] for i in range(0, len(text), 3)]
    client, timed, audio_ms = await speak(tiny_server, text, pieces, TINY_RATE, timestamps="word")
    words = [w for w, _ in timed]
    assert not client.got.of_type("warning")
    assert [w["text"] for w in words] == text.split()
    assert [text[w["char_start"] : w["char_end"]] for w in words] == text.split()
    for word, received in timed:
        first_byte = len(text[: word["char_start"]].encode())
        assert word["start_ms"] == 20 * first_byte
        assert word["end_ms"] == 20 * (first_byte + len(word["text"].encode()))
        # Sent before the audio holding the word's first sample.
        assert received / 2 <= word["start_ms"] * TINY_RATE / 1000
    check_order(words, audio_ms)
    await client.close()


async def test_timestamps_follow_the_session_setting(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    await client.send(type="session.update", timestamps="word", output_format=pcm(TINY_RATE))
    await client.until("session.updated")
    # Opened implicitly by its first text: the session's defaults apply.
    await client.send(type="text.append", context_id="a", text="one two")
    await client.send(type="context.end", context_id="a")
    await client.until("context.done", "a")
    # context.create turns them off again for one context.
    await client.send(type="context.create", context_id="b", timestamps="none")
    await client.send(type="text.append", context_id="b", text="three four")
    await client.send(type="context.end", context_id="b")
    await client.until("context.done", "b")
    stamped = client.got.of_type("timestamps")
    assert {m["context_id"] for m in stamped} == {"a"}
    assert [w["text"] for m in stamped for w in m["words"]] == ["one", "two"]
    await client.close()


async def test_bad_timestamps_mode_names_the_field(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    await client.send(type="context.create", context_id="x", timestamps="phoneme")
    err = await client.until("error")
    assert err["param"] == "timestamps" and "word" in err["message"]
    await client.close()


async def test_piper_words_from_the_duration_predictor(piper_server: RunningServer) -> None:
    text = "Hello there, how are you today? I hope the weather is fine where you are."
    pieces = [w if i == 0 else " " + w for i, w in enumerate(text.split(" "))]
    client, timed, audio_ms = await speak(piper_server, text, pieces, PIPER_RATE, timestamps="word")
    words = [w for w, _ in timed]
    assert not client.got.of_type("warning")
    assert [w["text"] for w in words] == text.split()
    assert [text[w["char_start"] : w["char_end"]] for w in words] == text.split()
    check_order(words, audio_ms)
    assert all(w["end_ms"] > w["start_ms"] for w in words)
    # The last phoneme ends the audio but for the sentence's closing silence.
    assert 0 <= audio_ms - words[-1]["end_ms"] < 400
    for word, received in timed:
        assert received / 2 <= word["start_ms"] * PIPER_RATE / 1000 + 1
    await client.close()


async def test_piper_word_durations_follow_speed(piper_server: RunningServer) -> None:
    text = "Extraordinary circumstances require patience."
    durations = {}
    for speed in (1.0, 2.0):
        client, timed, audio_ms = await speak(
            piper_server, text, [text], PIPER_RATE, timestamps="word", speed=speed
        )
        words = [w for w, _ in timed]
        assert [w["text"] for w in words] == text.split()
        durations[speed] = [w["end_ms"] - w["start_ms"] for w in words]
        await client.close()
    for slow, fast in zip(durations[1.0], durations[2.0], strict=True):
        assert fast < 0.7 * slow, durations


@pytest.fixture(scope="module")
def qwen3_batch_text_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("qwen3_words")
    checkpoint: Path = build_checkpoint(
        root / "cv", BuildOptions(variant="custom_voice", size_name="1b7", seed=5)
    )
    options = {"max_frames": 40, "streaming_text": False}
    config = with_checkpoint(config_for_checkpoint(checkpoint, options), checkpoint)
    with run_server(config, ServerConfig()) as running:
        yield running


async def test_a_model_that_cannot_align_warns_once_and_still_speaks(
    qwen3_batch_text_server: RunningServer,
) -> None:
    """Qwen3 with all text in the prompt has no per-word entry frame: no timings."""
    server = qwen3_batch_text_server
    voice = server.runtime.model.capabilities.voices[0].name
    client = await Client.connect(server.ws)
    await client.send(
        type="context.create", context_id="q", voice=voice, timestamps="word", temperature=0
    )
    await client.send(type="text.append", context_id="q", text="Hello there.")
    await client.send(type="context.end", context_id="q")
    await client.until("context.done", "q")
    warnings = client.got.of_type("warning")
    assert len(warnings) == 1 and warnings[0]["context_id"] == "q"
    assert "timestamps" in warnings[0]["message"]
    assert not client.got.of_type("timestamps")
    await client.close()
