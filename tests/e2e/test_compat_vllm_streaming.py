"""Speech before the text ends on the vllm-omni socket: vllm-omni's token-level streaming
(``streaming_mode: "token_level"``, as its ``token_level_streaming_client.py`` sends it)
and the segmenter's timers in the default sentence/clause mode.

No wall clock is asserted: "before" means the audio arrived before the client sent the
rest of its text (it waits for the audio first; a server that waited for ``input.done``
would leave it waiting until the read times out)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import TEST_LIMITS
from tests.e2e.test_compat_vllm import (
    OUT_RATE,
    PIPER_TEXT,
    Sentence,
    VllmClient,
    native_pcm,
    tiny_samples,
    wait_for_no_contexts,
)
from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.serving import RunningServer, run_server
from voiceserver.config import (
    Limits,
    ServerConfig,
    config_for_checkpoint,
    load_model_config,
    with_checkpoint,
)

# vllm-omni's token_level_streaming_client.py: its default text, in its chunks.
CHUNKS = [
    "Hello there, ",
    "this is a token level ",
    "streaming text input test ",
    "for Qwen3 TTS. ",
    "The audio starts playing ",
    "before all the text has been sent.",
]
TEXT = "".join(CHUNKS).strip()
TOKEN_LEVEL = {"streaming_mode": "token_level", "response_format": "pcm"}


async def first_audio(client: VllmClient) -> tuple[dict[str, Any], bytes]:
    """audio.start, then the first binary frame (nothing else may come between)."""
    start = await client.next_message(timeout=10)
    assert start["type"] == "audio.start", start
    data = await client.recv(timeout=10)
    assert isinstance(data, bytes), data
    return start, data


async def rest_of_utterance(client: VllmClient, sentence: Sentence) -> dict[str, Any]:
    """The rest of a token-level utterance's audio, its audio.done; session.done."""
    while True:
        data = await client.recv()
        if isinstance(data, bytes):
            sentence.audio.append(data)
            continue
        if data["type"] == "audio.done":
            sentence.done = data
            break
        assert data["type"] == "error", data
    return await client.next_message()


async def test_token_level_starts_before_the_rest_is_sent(tiny_server: RunningServer) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", voice="tiny-a", **TOKEN_LEVEL)
    for chunk in CHUNKS[:2]:
        await client.send(type="input.text", text=chunk)
    start, audio = await first_audio(client)
    # vllm-omni's resumable session: sentence 0, named by the first fragment.
    assert start == {
        "type": "audio.start",
        "utterance_index": 0,
        "sentence_index": 0,
        "sentence_text": CHUNKS[0],
        "format": "pcm",
        "sample_rate": OUT_RATE,
        "channels": 1,
    }
    for chunk in CHUNKS[2:]:
        await client.send(type="input.text", text=chunk)
    await client.send(type="input.done")
    sentence = Sentence(start, [audio])
    done = await rest_of_utterance(client, sentence)
    # One request for the whole utterance: one audio.start/audio.done pair, and
    # total_sentences counts the fragments fed into it, as vllm-omni counts them.
    assert done == {"type": "session.done", "utterance_index": 0, "total_sentences": len(CHUNKS)}
    assert sentence.done == {
        "type": "audio.done",
        "utterance_index": 0,
        "sentence_index": 0,
        "total_bytes": len(sentence.data),
        "error": False,
    }
    # One engine context spoke all of it: the tiny model's samples for the whole text.
    assert len(sentence.data) == 2 * tiny_samples(TEXT, OUT_RATE)

    # The socket takes the next utterance, token level again, from its first text.
    utt = await client.speak(["Once more, ", "with feeling."])
    assert len(utt.sentences) == 1 and utt.errors == []
    assert utt.sentences[0].start["utterance_index"] == 1
    assert utt.sentences[0].start["sentence_text"] == "Once more, "
    assert len(utt.sentences[0].data) == 2 * tiny_samples("Once more, with feeling.", OUT_RATE)
    assert utt.done == {"type": "session.done", "utterance_index": 1, "total_sentences": 2}
    await client.close()


async def test_token_level_empty_utterance_and_config_between(tiny_server: RunningServer) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", **TOKEN_LEVEL)
    utt = await client.speak([])
    assert utt.sentences == [] and utt.done["total_sentences"] == 0
    # Back to sentences between utterances, and token level again.
    await client.send(type="session.config", response_format="pcm", split_granularity="sentence")
    utt = await client.speak(["One. ", "Two."])
    assert [s.start["sentence_text"] for s in utt.sentences] == ["One.", "Two."]
    await client.send(type="session.config", response_format="wav", streaming_mode="token_level")
    [sentence] = (await client.speak(["Three, ", "four."])).sentences
    assert sentence.start["format"] == "wav" and sentence.data[:4] == b"RIFF"
    await client.close()


async def test_token_level_word_timestamps_cover_the_utterance(tiny_server: RunningServer) -> None:
    """Baseten's timestamps work in token level too: the one audio.done carries every
    word of the utterance, timed from its first sample (the tiny model: exact)."""
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", timestamp_type="word", **TOKEN_LEVEL)
    utt = await client.speak(CHUNKS)
    await client.close()
    [sentence] = utt.sentences
    assert sentence.done is not None
    alignment = sentence.done["timestamp_info"]["word_alignment"]
    assert alignment["words"] == TEXT.split()
    starts, ends = alignment["word_start_times_seconds"], alignment["word_end_times_seconds"]
    at = 0
    for word, start, end in zip(TEXT.split(), starts, ends, strict=True):
        at = TEXT.index(word, at)
        assert start == pytest.approx(0.02 * len(TEXT[:at].encode()))
        assert end == pytest.approx(start + 0.02 * len(word.encode()))
        at += len(word)


@pytest.mark.parametrize(
    ("config", "field", "says"),
    [
        ({"response_format": "mp3"}, "response_format", "with token_level use one of"),
        ({"streaming_mode": "sentence_commit"}, "streaming_mode", "'sentence_commit' is not"),
        ({"streaming_mode": "tokens"}, "streaming_mode", "allowed"),
    ],
)
async def test_token_level_refusals_name_the_field(
    tiny_server: RunningServer, config: dict[str, Any], field: str, says: str
) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="pcm")
    await client.send(type="session.config", **{**TOKEN_LEVEL, **config})
    error = await client.next_message()
    assert error["type"] == "error" and field in error["message"] and says in error["message"]
    # The session keeps its sentence config.
    utt = await client.speak(["Still sentences. ", "Two of them."])
    assert len(utt.sentences) == 2
    await client.close()


async def test_token_level_text_limit(tiny_server: RunningServer) -> None:
    """All of a token-level utterance's text counts toward max_text_chars; the refusal
    comes at once, between the utterance's audio frames, and the utterance goes on."""
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", **TOKEN_LEVEL)
    await client.send(type="input.text", text="word " * 10)
    await client.send(type="input.text", text="x" * TEST_LIMITS.max_text_chars)
    start = await client.next_message()
    assert start["type"] == "audio.start"
    sentence = Sentence(start)
    while True:
        data = await client.recv()
        if isinstance(data, bytes):
            sentence.audio.append(data)
        else:
            assert data["type"] == "error" and "text_too_long" in data["message"], data
            break
    await client.send(type="input.done")
    done = await rest_of_utterance(client, sentence)
    assert done["total_sentences"] == 1
    assert len(sentence.data) == 2 * tiny_samples("word " * 10, OUT_RATE)
    await client.close()


async def test_token_level_disconnect_frees_the_engine_slot(tiny_server: RunningServer) -> None:
    await wait_for_no_contexts(tiny_server)
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", **TOKEN_LEVEL)
    await client.send(type="input.text", text="The first words, and then nothing")
    await first_audio(client)
    assert tiny_server.runtime.engine.snapshot().active_contexts == 1
    await client.close()
    await wait_for_no_contexts(tiny_server)


@pytest.fixture(scope="module")
def quick_idle() -> Iterator[RunningServer]:
    limits = Limits(context_idle_timeout_s=0.5)
    with run_server(load_model_config("tiny"), ServerConfig(limits=limits)) as server:
        yield server


async def test_token_level_utterance_left_open_is_ended(quick_idle: RunningServer) -> None:
    """A client that sends text and then nothing does not hold an engine slot for good:
    after context_idle_timeout_s the utterance ends as if input.done had come."""
    client = await VllmClient.connect(quick_idle)
    await client.send(type="session.config", **TOKEN_LEVEL)
    await client.send(type="input.text", text="Left open")
    utt = await client.read_utterance()
    [error] = utt.errors
    assert error["message"].startswith("idle_timeout: no input.text or input.done for 0.5 s")
    [sentence] = utt.sentences
    assert len(sentence.data) == 2 * tiny_samples("Left open", OUT_RATE)
    assert utt.done == {"type": "session.done", "utterance_index": 0, "total_sentences": 1}
    await wait_for_no_contexts(quick_idle)
    # The socket goes on.
    utt = await client.speak(["Back again."])
    assert utt.done["utterance_index"] == 1 and len(utt.sentences) == 1
    await client.close()


# -- the default mode: a finished sentence at once, no text waits for ever ------------------


async def test_finished_sentence_is_spoken_before_anything_follows(
    tiny_server: RunningServer,
) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="pcm")
    await client.send(type="input.text", text="Sure thing. ")
    first = await client.read_sentence()  # nothing else was sent
    assert first.start["sentence_text"] == "Sure thing."
    await client.send(type="input.text", text="Bye")
    await client.send(type="input.done")
    utt = await client.read_utterance()
    assert [s.start["sentence_text"] for s in utt.sentences] == ["Bye"]
    await client.close()


@pytest.mark.parametrize("granularity", ["clause", "sentence"])
async def test_text_without_a_boundary_does_not_wait_for_input_done(
    tiny_server: RunningServer, granularity: str
) -> None:
    """The segmenter's max_delay_ms: held text is spoken once it has waited that long."""
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="pcm", split_granularity=granularity)
    await client.send(type="input.text", text="no boundary anywhere in this ")
    first = await client.read_sentence()
    assert first.start["sentence_text"] == "no boundary anywhere in this"
    await client.send(type="input.done")
    utt = await client.read_utterance()
    assert utt.sentences == [] and utt.done["total_sentences"] == 1
    await client.close()


async def test_none_still_waits_with_timers(tiny_server: RunningServer) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="pcm", split_granularity="none")
    await client.send(type="input.text", text="Held until done. Even this.")
    with pytest.raises(TimeoutError):
        await client.recv(timeout=1.5)  # past max_delay_ms (1 s): still nothing
    utt = await client.speak([])
    assert [s.start["sentence_text"] for s in utt.sentences] == ["Held until done. Even this."]
    await client.close()


# -- real speech ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def piper_server() -> Iterator[RunningServer]:
    config = load_model_config("piper-joe", {"noise_scale": 0, "noise_w_scale": 0})
    with run_server(config, ServerConfig()) as server:
        yield server


async def test_piper_token_level_speaks_the_whole_reply(piper_server: RunningServer) -> None:
    """vllm-omni's token-level client against Piper: audio before the rest is sent, one
    stream of 24 kHz speech as long as the native socket's for the same text."""
    client = await VllmClient.connect(piper_server)
    await client.send(type="session.config", voice="joe", **TOKEN_LEVEL)
    words = PIPER_TEXT.split(" ")
    for word in words[:6]:
        await client.send(type="input.text", text=word + " ")
    start, audio = await first_audio(client)
    assert start["sample_rate"] == OUT_RATE
    for i, word in enumerate(words[6:]):
        await client.send(type="input.text", text=word + ("" if 6 + i == len(words) - 1 else " "))
        await asyncio.sleep(0)
    await client.send(type="input.done")
    sentence = Sentence(start, [audio])
    done = await rest_of_utterance(client, sentence)
    await client.close()
    assert done["total_sentences"] == len(words)
    assert sentence.done is not None and not sentence.done["error"]
    reference = await native_pcm(piper_server, [[PIPER_TEXT]], OUT_RATE)
    # Cut where the words came, the speech is as long as the whole text's within 20 %.
    assert abs(len(sentence.data) - len(reference)) < 0.2 * len(reference)


# -- a model that reads text as it streams (Qwen3-TTS) -------------------------------------


@pytest.fixture(scope="module")
def qwen3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("token_level_qwen3")
    checkpoint = build_checkpoint(root / "cv", BuildOptions(variant="custom_voice"))
    config = with_checkpoint(config_for_checkpoint(checkpoint, {"max_frames": 60}), checkpoint)
    with run_server(config, ServerConfig()) as server:
        yield server


async def test_qwen3_token_level_feeds_words_as_they_come(qwen3_server: RunningServer) -> None:
    """Qwen3-TTS takes text word by word (no segmenter): the one context of the utterance
    gets each word as it completes, and the held last word after max_delay_ms."""
    client = await VllmClient.connect(qwen3_server)
    await client.send(type="session.config", seed=1, **TOKEN_LEVEL)
    await client.send(type="input.text", text="Hello there")  # "there" may go on: held
    start, audio = await first_audio(client)  # "Hello" is spoken before more comes
    assert start["sentence_text"] == "Hello there"
    await client.send(type="input.text", text=", how are you today?")
    await client.send(type="input.done")
    sentence = Sentence(start, [audio])
    done = await rest_of_utterance(client, sentence)
    assert done == {"type": "session.done", "utterance_index": 0, "total_sentences": 2}
    assert sentence.done is not None and sentence.done["error"] is False
    assert sentence.data and sentence.done["total_bytes"] == len(sentence.data)
    await client.close()
