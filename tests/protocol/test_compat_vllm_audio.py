"""The vllm-omni socket's audio.chunk messages and binary framing, as its clients read them."""

import base64
import json

from protocol.compat_vllm import decode_vllm_server, encode_vllm_server
from voiceserver.transport.compat_audio import (
    MAX_CHUNK_PCM_BYTES,
    MAX_FRAME_BYTES,
    ChunkMessages,
    WordTimings,
    binary_frames,
)

RATE = 24000


def test_binary_frames_join_to_the_file_and_stay_under_the_limit():
    data = bytes(range(256)) * (5 * MAX_FRAME_BYTES // 256 // 2 + 7)
    frames = list(binary_frames(data))
    assert len(frames) == 3 and b"".join(frames) == data
    assert all(len(f) <= MAX_FRAME_BYTES for f in frames)
    assert all(len(f) % 2 == 0 for f in frames[:-1])  # s16 samples stay whole
    assert list(binary_frames(b"")) == []


def test_chunks_then_a_trailer_without_timings():
    chunks = ChunkMessages(utterance_index=2, sentence_index=1, sample_rate=RATE)
    first = chunks.audio(b"\x01\x00" * 4800)  # 200 ms
    second = chunks.audio(b"\x02\x00" * 2400)  # 100 ms
    trailer = chunks.trailer(WordTimings())
    wire = [json.loads(encode_vllm_server(m)) for m in (*first, *second, trailer)]
    assert [(m["chunk_id"], m["chunk_start_ms"], m["chunk_end_ms"]) for m in wire] == [
        (0, 0, 200),
        (1, 200, 300),
        (2, 0, 300),
    ]
    assert wire[2] == {
        "type": "audio.chunk",
        "utterance_index": 2,
        "sentence_index": 1,
        "chunk_id": 2,
        "chunk_start_ms": 0,
        "chunk_end_ms": 300,
        "sample_rate": RATE,
        "channels": 1,
        "audio_b64": "",
        "timestamps": None,  # sent as null, never left out
    }
    assert base64.b64decode(wire[1]["audio_b64"]) == b"\x02\x00" * 2400


def test_a_huge_payload_is_cut_into_several_chunks():
    chunks = ChunkMessages(0, 0, RATE)
    pcm = b"\x03\x00" * (MAX_CHUNK_PCM_BYTES // 2 + 10)
    messages = chunks.audio(pcm)
    assert len(messages) == 2
    assert b"".join(base64.b64decode(m.audio_b64) for m in messages) == pcm
    assert all(len(encode_vllm_server(m)) < MAX_FRAME_BYTES for m in messages)


def test_timings_go_into_the_trailer():
    timings = WordTimings()
    chunks = ChunkMessages(0, 0, RATE)
    chunks.audio(b"\x00\x00" * RATE)
    assert chunks.trailer(timings).timestamps is None  # no alignment
    timings.aligned()
    assert chunks.trailer(timings).timestamps == []  # aligned, nothing spoken
    timings.add("Hello,", 0.0, 0.4204)
    timings.add("world.", 0.45, 0.9)
    trailer = decode_vllm_server(encode_vllm_server(chunks.trailer(timings)))
    assert [(w.word, w.start_ms, w.end_ms) for w in trailer.timestamps] == [
        ("Hello,", 0, 420),
        ("world.", 450, 900),
    ]
