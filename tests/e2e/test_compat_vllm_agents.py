"""The vllm-omni socket as voice agents and vllm-omni's own clients use it: the output
rate, speech before the reply ends, several utterances per socket, word timestamps in
vllm-omni's form and Baseten's, the 1 MiB frame limit of the ``websockets`` client,
refusals in the log.

Every client here is a plain ``websockets`` connection speaking vllm-omni's messages."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import websockets

from tests.e2e.test_compat_vllm import (
    OUT_RATE,
    PIPER_RATE,
    PIPER_TEXT,
    TINY_RATE,
    VllmClient,
    as_float,
    compat_url,
    native_pcm,
    parse_wav,
    snr_db,
    tiny_samples,
)
from tests.serving import RunningServer, run_server
from voiceserver.config import ServerConfig, load_model_config

WEBSOCKETS_DEFAULT_MAX_SIZE = 1 << 20


@pytest.fixture(scope="module")
def piper_server() -> Iterator[RunningServer]:
    config = load_model_config("piper-joe", {"noise_scale": 0, "noise_w_scale": 0})
    with run_server(config, ServerConfig()) as server:
        yield server


def pcm_seconds(data: bytes, rate: int) -> float:
    return len(data) / 2 / rate


# -- the output rate -------------------------------------------------------------------


async def test_piper_pcm_is_24khz_and_announced(piper_server: RunningServer) -> None:
    """Piper makes 22,050 Hz; a client that assumes 24 kHz pcm (as vllm-omni's Qwen3-TTS
    and our HTTP pcm send) must get 24 kHz, named in audio.start, streamed or not."""
    reference = as_float(await native_pcm(piper_server, [[PIPER_TEXT]], OUT_RATE))
    for stream in (False, True):
        client = await VllmClient.connect(piper_server)
        await client.send(
            type="session.config",
            response_format="pcm",
            stream_audio=stream,
            split_granularity="none",
        )
        [sentence] = (await client.speak([PIPER_TEXT])).sentences
        await client.close()
        assert sentence.start["sample_rate"] == OUT_RATE and sentence.start["channels"] == 1
        got = as_float(sentence.data)
        # The same samples as the native endpoint at 24 kHz: the right pitch and length.
        assert len(got) == len(reference) > OUT_RATE
        assert snr_db(reference, got) >= 60.0


@pytest.mark.parametrize(("fmt", "rate"), [("pcm", 16000), ("wav", 48000), ("wav", PIPER_RATE)])
async def test_sample_rate_is_honoured(piper_server: RunningServer, fmt: str, rate: int) -> None:
    client = await VllmClient.connect(piper_server)
    await client.send(
        type="session.config", response_format=fmt, sample_rate=rate, split_granularity="none"
    )
    [sentence] = (await client.speak([PIPER_TEXT])).sentences
    await client.close()
    assert sentence.start["sample_rate"] == rate and sentence.start["format"] == fmt
    pcm = sentence.data
    if fmt == "wav":
        header_rate, pcm = parse_wav(sentence.data)
        assert header_rate == rate
    reference = await native_pcm(piper_server, [[PIPER_TEXT]], rate)
    assert len(pcm) == len(reference)
    assert snr_db(as_float(reference), as_float(pcm)) >= 60.0


async def test_a_rate_not_offered_is_refused_by_name(tiny_server: RunningServer) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="opus", sample_rate=44100)
    error = await client.next_message()
    assert error["message"] == (
        "Invalid session config: sample_rate: 44100 Hz is not offered for opus;"
        " allowed: 8000, 12000, 16000, 24000, 48000"
    )
    assert await client.closed_code() == 1008


# -- speech before the reply ends --------------------------------------------------------


REPLY = "Well, I think that is fine, and your order shipped yesterday. It should arrive soon."
FIRST_CLAUSE = "Well, I think that is fine,"


async def test_default_split_speaks_before_input_done(tiny_server: RunningServer) -> None:
    """What a framework plugin sends: no split setting, pcm, words as an LLM streams them.
    The first clause is spoken while the reply is still arriving."""
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="pcm")
    words = REPLY.split(" ")
    # The clause ends where the next word starts ("fine, and").
    head = len(FIRST_CLAUSE.split(" ")) + 1
    for i, word in enumerate(words[:head]):
        await client.send(type="input.text", text=word if i == 0 else " " + word)
    # The clause is spoken before the sentence (let alone the reply) is complete.
    first = await client.read_sentence()
    assert first.start["sentence_text"] == FIRST_CLAUSE
    assert first.start["sample_rate"] == OUT_RATE
    assert len(first.data) == 2 * tiny_samples(FIRST_CLAUSE, OUT_RATE)
    for word in words[head:]:
        await client.send(type="input.text", text=" " + word)
    await client.send(type="input.done")
    utt = await client.read_utterance()
    spoken = [first.start["sentence_text"]] + [s.start["sentence_text"] for s in utt.sentences]
    assert " ".join(spoken) == REPLY
    assert utt.done["total_sentences"] == len(spoken) > 2
    await client.close()


async def test_explicit_none_still_waits_for_input_done(tiny_server: RunningServer) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="pcm", split_granularity="none")
    for word in REPLY.split(" "):
        await client.send(type="input.text", text=word + " ")
    with pytest.raises(TimeoutError):
        await client.recv(timeout=1.0)  # nothing until the flush
    await client.send(type="input.done")
    utt = await client.read_utterance()
    assert [s.start["sentence_text"] for s in utt.sentences] == [REPLY]
    await client.close()


# -- several utterances on one socket ------------------------------------------------------


async def test_three_utterances_on_one_socket(tiny_server: RunningServer) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="pcm")
    texts = ["First turn.", "Second turn, a bit longer.", "Third turn."]
    first = await client.speak([texts[0]])
    second = await client.speak(["Second turn,", " a bit longer."])  # streamed: clause cut
    # A new config between utterances applies to the next one only.
    await client.send(type="session.config", response_format="wav", sample_rate=16000)
    third = await client.speak([texts[2]])
    await client.send(type="session.close")
    assert await client.closed_code() == 1000

    for index, utt in enumerate((first, second, third)):
        assert utt.errors == []
        assert utt.done == {
            "type": "session.done",
            "utterance_index": index,
            "total_sentences": len(utt.sentences),
        }
        assert [s.start["utterance_index"] for s in utt.sentences] == [index] * len(utt.sentences)
        assert [s.start["sentence_index"] for s in utt.sentences] == list(range(len(utt.sentences)))
    assert [s.start["sentence_text"] for s in second.sentences] == [
        "Second turn,",
        "a bit longer.",
    ]
    for utt in (first, second):
        assert all(s.start["format"] == "pcm" for s in utt.sentences)
        assert sum(len(s.data) for s in utt.sentences) == sum(
            2 * tiny_samples(s.start["sentence_text"], OUT_RATE) for s in utt.sentences
        )
    [wav] = third.sentences
    assert wav.start["format"] == "wav" and wav.start["sample_rate"] == 16000
    rate, pcm = parse_wav(wav.data)
    assert rate == 16000 and len(pcm) == 2 * tiny_samples(texts[2], 16000)


# -- word timestamps -----------------------------------------------------------------------


async def read_chunked_sentence(client: VllmClient) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """audio.start, its audio.chunk messages, audio.done (no binary frame may come)."""
    start = await client.next_message()
    assert start["type"] == "audio.start", start
    chunks: list[dict[str, Any]] = []
    while True:
        msg = await client.next_message()
        if msg["type"] == "audio.done":
            return start, chunks
        assert msg["type"] == "audio.chunk", msg
        chunks.append(msg)


def tiny_word_times(sentence_text: str) -> list[tuple[str, int, int]]:
    """(word, start ms, end ms) as the tiny model speaks them: one input byte per 20 ms
    frame, so its timings are exact."""
    expected, at = [], 0
    for word in sentence_text.split():
        at = sentence_text.index(word, at)
        first = len(sentence_text[:at].encode())
        expected.append((word, 20 * first, 20 * (first + len(word.encode()))))
        at += len(word)
    return expected


async def test_word_timestamps_in_audio_chunks(tiny_server: RunningServer) -> None:
    """vllm-omni's form: ``word_timestamps: true`` sends the PCM in audio.chunk messages
    and each sentence's timings in a trailing empty one."""
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="pcm", word_timestamps=True)
    clauses = ["Word timestamps,", "please."]
    # Streamed in two pieces, so the clause is cut (a whole text would be one sentence).
    await client.send(type="input.text", text=clauses[0])
    await client.send(type="input.text", text=" " + clauses[1])
    await client.send(type="input.done")
    for index, sentence_text in enumerate(clauses):
        start, chunks = await read_chunked_sentence(client)
        assert start == {
            "type": "audio.start",
            "utterance_index": 0,
            "sentence_index": index,
            "sentence_text": sentence_text,
            "format": "pcm",
            "sample_rate": OUT_RATE,
            "channels": 1,
            "word_timestamps": True,
        }
        *body, trailer = chunks
        assert body, "the audio comes in audio.chunk messages"
        assert [c["chunk_id"] for c in chunks] == list(range(len(chunks)))
        pcm = b""
        for chunk in body:
            assert chunk["utterance_index"] == 0 and chunk["sentence_index"] == index
            assert (chunk["sample_rate"], chunk["channels"]) == (OUT_RATE, 1)
            assert chunk["timestamps"] is None
            assert chunk["chunk_start_ms"] == round(len(pcm) / 2 / OUT_RATE * 1000)
            pcm += base64.b64decode(chunk["audio_b64"])
            assert chunk["chunk_end_ms"] == round(len(pcm) / 2 / OUT_RATE * 1000)
        assert pcm == await native_pcm(tiny_server, [[sentence_text]], OUT_RATE)
        # The trailing empty chunk spans the sentence and carries its words' timing.
        assert trailer["audio_b64"] == ""
        assert trailer["chunk_start_ms"] == 0
        assert trailer["chunk_end_ms"] == round(len(pcm) / 2 / OUT_RATE * 1000)
        assert trailer["timestamps"] == [
            {"word": word, "start_ms": start_ms, "end_ms": end_ms}
            for word, start_ms, end_ms in tiny_word_times(sentence_text)
        ]
    done = await client.next_message()
    assert done == {"type": "session.done", "utterance_index": 0, "total_sentences": 2}
    await client.close()


def alignment(sentence_text: str) -> dict[str, Any]:
    """Baseten's ``timestamp_info`` of a tiny-model sentence (seconds, sentence-relative)."""
    times = tiny_word_times(sentence_text)
    return {
        "word_alignment": {
            "words": [word for word, _, _ in times],
            "word_start_times_seconds": [start / 1000 for _, start, _ in times],
            "word_end_times_seconds": [end / 1000 for _, _, end in times],
        }
    }


@pytest.mark.parametrize("fmt", ["pcm", "mp3"])
async def test_timestamp_type_word_keeps_binary_audio_and_times_in_audio_done(
    tiny_server: RunningServer, fmt: str
) -> None:
    """Baseten's form (LiveKit's Baseten plugin): ``timestamp_type: "word"``, strategy
    ``sync`` (also its default): the audio stays binary, in any format, and each
    sentence's timings come in its audio.done."""
    client = await VllmClient.connect(tiny_server)
    await client.send(
        type="session.config",
        response_format=fmt,
        stream_audio=fmt == "pcm",
        timestamp_type="word",
        timestamp_transport_strategy="sync",
    )
    clauses = ["Word timestamps,", "please."]
    utt = await client.speak([clauses[0], " " + clauses[1]])
    await client.close()
    assert [s.start["sentence_text"] for s in utt.sentences] == clauses
    for sentence in utt.sentences:
        text = sentence.start["sentence_text"]
        assert "word_timestamps" not in sentence.start
        if fmt == "pcm":
            assert sentence.data == await native_pcm(tiny_server, [[text]], OUT_RATE)
        else:
            assert sentence.data.startswith(b"ID3") and len(sentence.audio) == 1
        assert sentence.done == {
            "type": "audio.done",
            "utterance_index": 0,
            "sentence_index": sentence.start["sentence_index"],
            "total_bytes": len(sentence.data),
            "error": False,
            "timestamp_info": alignment(text),
        }
    assert utt.done["total_sentences"] == 2


async def test_async_timestamps_follow_the_audio(tiny_server: RunningServer) -> None:
    """Strategy ``async``: audio.done carries none; ``timestamps`` messages for every
    sentence come after the utterance's audio, before session.done."""
    client = await VllmClient.connect(tiny_server)
    await client.send(
        type="session.config",
        response_format="pcm",
        timestamp_type="word",
        timestamp_transport_strategy="async",
    )
    await client.send(type="input.text", text="First one. Second")
    await client.send(type="input.text", text=" one.")
    await client.send(type="input.done")
    sentences = [await client.read_sentence(), await client.read_sentence()]
    assert all("timestamp_info" not in s.done for s in sentences if s.done is not None)
    texts = [s.start["sentence_text"] for s in sentences]
    assert texts == ["First one.", "Second one."]
    for index, text in enumerate(texts):
        assert await client.next_message() == {
            "type": "timestamps",
            "utterance_index": 0,
            "sentence_index": index,
            "timestamp_info": alignment(text),
        }
    done = await client.next_message()
    assert done == {"type": "session.done", "utterance_index": 0, "total_sentences": 2}
    await client.close()


async def test_word_timestamps_need_pcm(tiny_server: RunningServer) -> None:
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="pcm")
    await client.send(type="session.config", response_format="mp3", word_timestamps=True)
    error = await client.next_message()
    assert error["message"].startswith(
        "Invalid session config: word_timestamps: word timestamps come in audio.chunk"
    )
    assert 'set response_format to "pcm"' in error["message"]
    assert 'timestamp_type "word"' in error["message"]
    # The session keeps its pcm config, without timestamps.
    [sentence] = (await client.speak(["Still pcm."])).sentences
    assert "word_timestamps" not in sentence.start
    assert sentence.done is not None and "timestamp_info" not in sentence.done
    assert len(sentence.data) == 2 * tiny_samples("Still pcm.", OUT_RATE)
    await client.close()


# -- the 1 MiB frame limit of websockets clients -----------------------------------------

# One segment even without a split (under segmenter.max_chars, 400): about 20 s of speech,
# at 48 kHz about 2 MB of PCM.
LONG_RATE = 48000
LONG_PARAGRAPH = (
    "This is a rather long paragraph that a client sends in one piece and asks to hear"
    " without any split, so the server has to speak all of it as a single sentence and"
    " send it back as a single file. At forty eight thousand samples a second that file"
    " holds far more than one mebibyte of audio, which is the largest message that the"
    " websockets library accepts unless its client raises the limit."
)


@pytest.mark.parametrize("fmt", ["wav", "pcm"])
async def test_long_sentence_fits_the_default_client_frame_limit(
    piper_server: RunningServer, fmt: str
) -> None:
    assert len(LONG_PARAGRAPH) <= 400
    async with websockets.connect(compat_url(piper_server)) as ws:  # max_size: 1 MiB
        assert ws.protocol.max_message_size == WEBSOCKETS_DEFAULT_MAX_SIZE
        client = VllmClient(ws)
        await client.send(
            type="session.config",
            response_format=fmt,
            sample_rate=LONG_RATE,
            split_granularity="none",
        )
        [sentence] = (await client.speak([LONG_PARAGRAPH])).sentences
    assert sentence.start["sentence_text"] == LONG_PARAGRAPH
    assert sentence.done is not None and sentence.done["total_bytes"] == len(sentence.data)
    assert len(sentence.data) > WEBSOCKETS_DEFAULT_MAX_SIZE  # more than one frame could hold
    assert all(len(frame) <= WEBSOCKETS_DEFAULT_MAX_SIZE for frame in sentence.audio)
    # Joined, the frames are the sentence's file, as vllm-omni's clients join them.
    pcm = sentence.data
    if fmt == "wav":
        rate, pcm = parse_wav(sentence.data)
        assert rate == LONG_RATE
    assert pcm_seconds(pcm, LONG_RATE) > 15
    reference = await native_pcm(piper_server, [[LONG_PARAGRAPH]], LONG_RATE)
    assert snr_db(as_float(reference), as_float(pcm)) >= 60.0


# -- refusals reach the server log ------------------------------------------------------------


SECRET = "the-rest-of-what-the-client-typed-" * 20


async def test_refusals_are_logged(
    tiny_server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="voiceserver.transport.compat_vllm")
    client = await VllmClient.connect(tiny_server)
    await client.send(type="session.config", response_format="pcm")
    await client.send(type="session.config", sample_rate=11025)
    await client.send(type="input.text", text="\x07" + SECRET)
    for _ in range(2):
        assert (await client.next_message())["type"] == "error"
    await client.close()

    # A bad first message closes the connection; its refusal is logged too.
    client = await VllmClient.connect(tiny_server)
    await client.ws.send(json.dumps({"type": "session.config", "split_granularity": "words"}))
    assert await client.closed_code() == 1008

    await asyncio.sleep(0.05)
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "voiceserver.transport.compat_vllm" and r.levelno >= logging.INFO
    ]
    refused = [line for line in lines if "refused" in line]
    assert any(
        "session.config (field sample_rate)" in line and "11025 Hz is not offered" in line
        for line in refused
    ), lines
    assert any(
        "input.text (field text)" in line and "control character" in line for line in refused
    ), lines
    assert any(
        "session.config (field split_granularity) and closed the connection" in line
        and "allowed: 'none', 'sentence', 'clause'" in line
        for line in refused
    ), lines
    assert not any(SECRET[:40] in line for line in lines)
    assert all(len(line) < 400 for line in refused)


async def test_initial_codec_chunk_frames_sizes_the_first_chunk(tiny_server: RunningServer) -> None:
    """vllm-omni's ``initial_codec_chunk_frames``: the first streamed chunk holds that many
    frames (the tiny model: 20 ms each); 0 keeps the server's default."""
    sizes = {}
    for frames in (0, 5):
        client = await VllmClient.connect(tiny_server)
        await client.send(
            type="session.config",
            response_format="pcm",
            sample_rate=TINY_RATE,  # the model's own: no resampler delay in the way
            stream_audio=True,
            split_granularity="none",
            initial_codec_chunk_frames=frames,
        )
        said = await client.speak(["A sentence long enough for several chunks of audio."])
        assert said.errors == [] and len(said.sentences) == 1
        sizes[frames] = len(said.sentences[0].audio[0]) // 2  # s16le samples
        await client.close()
    per_frame = TINY_RATE * 20 // 1000
    assert sizes[5] == 5 * per_frame
    assert sizes[0] == load_model_config("tiny").engine.first_chunk_frames * per_frame
