"""The vllm-omni compatibility message set round-trips and validates like vllm-omni's."""

import json

import pytest

from protocol import ErrorCode, ProtocolError
from protocol.compat_vllm import (
    DEFAULT_SPLIT,
    TimestampInfo,
    VllmAudioChunk,
    VllmAudioDone,
    VllmAudioStart,
    VllmError,
    VllmInputDone,
    VllmInputText,
    VllmSessionClose,
    VllmSessionConfig,
    VllmSessionDone,
    VllmTimestamps,
    VllmVoiceAdd,
    VllmVoiceAddResult,
    VllmVoiceList,
    VllmVoiceListResult,
    VllmVoiceRemove,
    VllmVoiceRemoveResult,
    VllmWordTimestamp,
    WordAlignment,
    decode_vllm_client,
    decode_vllm_server,
    encode_vllm_client,
    encode_vllm_server,
    vllm_error,
)

CLIENT = [
    VllmSessionConfig(),
    VllmSessionConfig(
        model="Qwen/Qwen3-TTS",
        voice="vivian",
        task_type="CustomVoice",
        language="English",
        instructions="calm",
        response_format="pcm",
        speed=1.0,
        max_new_tokens=2048,
        initial_codec_chunk_frames=2,
        non_streaming_mode=False,
        ref_audio="data:audio/wav;base64,UklGRg==",
        ref_text="ref",
        x_vector_only_mode=True,
        speaker_embedding=[0.1, 0.2],
        stream_audio=True,
        word_timestamps=True,
        timestamp_type="word",
        seed=-5,
        split_granularity="sentence",
        sample_rate=16000,
    ),
    VllmSessionConfig(split_granularity="none", timestamp_type="none"),
    VllmSessionConfig(
        streaming_mode="token_level", timestamp_type="word", timestamp_transport_strategy="async"
    ),
    VllmInputText(text="Hello "),
    VllmInputDone(),
    VllmSessionClose(),
    VllmVoiceList(),
    VllmVoiceAdd(
        name="bob",
        consent="user_consent",
        audio_data="UklGRg==",
        audio_format="wav",
        ref_text="Hello.",
        speaker_description="calm",
        x_vector_only_mode=False,
    ),
    VllmVoiceRemove(name="bob"),
]

INFO = TimestampInfo(
    word_alignment=WordAlignment(
        words=["Hi,", "there"],
        word_start_times_seconds=[0.0, 0.28],
        word_end_times_seconds=[0.28, 0.8],
    )
)

SERVER = [
    VllmAudioStart(utterance_index=0, sentence_index=0, sentence_text="Hi.", format="wav"),
    VllmAudioStart(
        utterance_index=1,
        sentence_index=2,
        sentence_text="Hi.",
        format="pcm",
        sample_rate=24000,
        channels=1,
        word_timestamps=True,
    ),
    VllmAudioChunk(
        utterance_index=0,
        sentence_index=0,
        chunk_id=0,
        chunk_start_ms=0,
        chunk_end_ms=80,
        sample_rate=24000,
        channels=1,
        audio_b64="AAA=",
        timestamps=None,
    ),
    VllmAudioChunk(
        utterance_index=0,
        sentence_index=0,
        chunk_id=1,
        chunk_start_ms=0,
        chunk_end_ms=80,
        sample_rate=24000,
        channels=1,
        audio_b64="",
        timestamps=[VllmWordTimestamp(word="Hi", start_ms=0, end_ms=79.5)],
    ),
    VllmAudioDone(utterance_index=0, sentence_index=0, total_bytes=3840, error=False),
    VllmAudioDone(utterance_index=0, sentence_index=0, total_bytes=3840, timestamp_info=INFO),
    VllmTimestamps(utterance_index=0, sentence_index=1, timestamp_info=INFO),
    VllmTimestamps(utterance_index=0, sentence_index=1, error="no timings"),
    VllmSessionDone(utterance_index=0, total_sentences=1),
    VllmVoiceListResult(voices=["joe"], uploaded_voices=[{"name": "bob", "consent": ""}]),
    VllmVoiceAddResult(success=True, voice={"name": "bob"}),
    VllmVoiceAddResult(success=False, error="name: taken"),
    VllmVoiceRemoveResult(success=True, name="bob"),
    VllmError(message="Invalid JSON message"),
    VllmError(message="Generation failed", partial_audio=True, action="discard"),
]


@pytest.mark.parametrize("msg", CLIENT, ids=repr)
def test_client_round_trip(msg):
    assert decode_vllm_client(encode_vllm_client(msg)) == msg


@pytest.mark.parametrize("msg", SERVER, ids=repr)
def test_server_round_trip(msg):
    assert decode_vllm_server(encode_vllm_server(msg)) == msg


def test_defaults_match_vllm_omni_but_split():
    cfg = decode_vllm_client('{"type":"session.config"}')
    assert (cfg.response_format, cfg.speed, cfg.stream_audio, cfg.word_timestamps) == (
        "wav",
        1.0,
        False,
        False,
    )
    assert not cfg.wants_word_timestamps and cfg.sample_rate is None
    # Left out, split_granularity is ours (clause); asked for, vllm-omni's "none" holds.
    assert cfg.split_granularity is None and cfg.effective_split == DEFAULT_SPLIT == "clause"
    cfg = decode_vllm_client('{"type":"session.config","split_granularity":"none"}')
    assert cfg.effective_split == "none"
    assert decode_vllm_client('{"type":"input.text"}') == VllmInputText(text="")


@pytest.mark.parametrize(
    ("fields", "wanted"),
    [
        ('"word_timestamps":true', True),
        ('"timestamp_type":"word"', True),
        ('"timestamp_type":"none"', False),
        ('"word_timestamps":false', False),
        ('"word_timestamps":true,"timestamp_type":"none"', True),
    ],
)
def test_word_timestamps_asked_either_way(fields, wanted):
    cfg = decode_vllm_client('{"type":"session.config",' + fields + "}")
    assert cfg.wants_word_timestamps is wanted


@pytest.mark.parametrize(
    ("fields", "info", "strategy"),
    [
        ('"timestamp_type":"word"', True, "sync"),
        ('"timestamp_type":"word","timestamp_transport_strategy":"async"', True, "async"),
        ('"word_timestamps":true', False, "sync"),
        ('"timestamp_transport_strategy":"async"', False, "async"),
    ],
)
def test_baseten_timestamps(fields, info, strategy):
    """Baseten's ``timestamp_type: "word"`` (binary audio, timings in audio.done or
    ``timestamps``), apart from vllm-omni's ``word_timestamps`` (audio.chunk)."""
    cfg = decode_vllm_client('{"type":"session.config",' + fields + "}")
    assert cfg.wants_timestamp_info is info and cfg.timestamp_strategy == strategy


def test_audio_done_carries_timestamp_info_only_when_set():
    done = json.loads(
        encode_vllm_server(VllmAudioDone(utterance_index=0, sentence_index=0, timestamp_info=INFO))
    )
    assert done["timestamp_info"] == {
        "word_alignment": {
            "words": ["Hi,", "there"],
            "word_start_times_seconds": [0.0, 0.28],
            "word_end_times_seconds": [0.28, 0.8],
        }
    }


def test_speaker_is_an_alias_of_voice():
    cfg = decode_vllm_client('{"type":"session.config","speaker":"ryan"}')
    assert cfg.effective_voice == "ryan"
    cfg = decode_vllm_client('{"type":"session.config","speaker":"ryan","voice":"vivian"}')
    assert cfg.effective_voice == "vivian"


def test_audio_done_always_carries_total_bytes_and_error():
    assert json.loads(encode_vllm_server(VllmAudioDone(utterance_index=0, sentence_index=1))) == {
        "type": "audio.done",
        "utterance_index": 0,
        "sentence_index": 1,
        "total_bytes": 0,
        "error": False,
    }
    # Optional audio.start fields stay out unless set, as vllm-omni sends them.
    assert set(json.loads(encode_vllm_server(SERVER[0]))) == {
        "type",
        "utterance_index",
        "sentence_index",
        "sentence_text",
        "format",
    }


@pytest.mark.parametrize(
    ("data", "code", "param"),
    [
        ("not json", ErrorCode.INVALID_JSON, None),
        ('{"type":"context.create"}', ErrorCode.UNKNOWN_TYPE, "type"),
        ('{"type":"input.text","text":5}', ErrorCode.INVALID_FIELD, "text"),
        ('{"type":"session.config","speed":5}', ErrorCode.INVALID_FIELD, "speed"),
        ('{"type":"session.config","speed":0.1}', ErrorCode.INVALID_FIELD, "speed"),
        (
            '{"type":"session.config","response_format":"ogg"}',
            ErrorCode.UNSUPPORTED_VALUE,
            "response_format",
        ),
        ('{"type":"session.config","task_type":"Clone"}', ErrorCode.UNSUPPORTED_VALUE, "task_type"),
        (
            '{"type":"session.config","split_granularity":"word"}',
            ErrorCode.UNSUPPORTED_VALUE,
            "split_granularity",
        ),
        ('{"type":"session.config","stream_audio":"yes"}', ErrorCode.INVALID_FIELD, "stream_audio"),
        (
            '{"type":"session.config","timestamp_type":"char"}',
            ErrorCode.UNSUPPORTED_VALUE,
            "timestamp_type",
        ),
        (
            '{"type":"session.config","timestamp_transport_strategy":"later"}',
            ErrorCode.UNSUPPORTED_VALUE,
            "timestamp_transport_strategy",
        ),
        (
            '{"type":"session.config","streaming_mode":"tokens"}',
            ErrorCode.UNSUPPORTED_VALUE,
            "streaming_mode",
        ),
        ('{"type":"voice.add","consent":5}', ErrorCode.INVALID_FIELD, "consent"),
        ('{"type":"voice.remove","name":["x"]}', ErrorCode.INVALID_FIELD, "name"),
        ('{"type":"session.config","sample_rate":0}', ErrorCode.INVALID_FIELD, "sample_rate"),
        ('{"type":"session.config","sample_rate":"24k"}', ErrorCode.INVALID_FIELD, "sample_rate"),
        (
            '{"type":"session.config","initial_codec_chunk_frames":-1}',
            ErrorCode.INVALID_FIELD,
            "initial_codec_chunk_frames",
        ),
        # Names are capped as on the native socket: an error never echoes a megabyte.
        (
            json.dumps({"type": "session.config", "speaker": "v" * 257}),
            ErrorCode.INVALID_FIELD,
            "speaker",
        ),
        (
            json.dumps({"type": "session.config", "voice": "v" * 257}),
            ErrorCode.INVALID_FIELD,
            "voice",
        ),
        (
            json.dumps({"type": "session.config", "model": "m" * 257}),
            ErrorCode.INVALID_FIELD,
            "model",
        ),
        (
            json.dumps({"type": "session.config", "language": "l" * 257}),
            ErrorCode.INVALID_FIELD,
            "language",
        ),
        (
            json.dumps({"type": "session.config", "instructions": "i" * 10_001}),
            ErrorCode.INVALID_FIELD,
            "instructions",
        ),
    ],
)
def test_client_errors(data, code, param):
    with pytest.raises(ProtocolError) as info:
        decode_vllm_client(data)
    assert info.value.code is code
    assert info.value.param == param


def test_unknown_fields_are_ignored():
    assert decode_vllm_client('{"type":"input.done","x":1}') == VllmInputDone()


def test_vllm_error_text_carries_the_code():
    err = ProtocolError(ErrorCode.INVALID_JSON, "bad")
    assert vllm_error(err) == VllmError(message="invalid_json: bad")
