"""Every v1 message round-trips through the codec, both directions, with the wire shape
docs/protocol.md describes."""

import json

import pytest

from protocol import (
    PROTOCOL_VERSION,
    AudioMessage,
    BufferConfig,
    ContextCancel,
    ContextCancelled,
    ContextCreate,
    ContextCreated,
    ContextDone,
    ContextEnd,
    ContextFlush,
    ContextFlushed,
    ErrorMessage,
    Keepalive,
    Limits,
    OutputFormat,
    SessionClose,
    SessionCreated,
    SessionSettings,
    SessionUpdate,
    SessionUpdated,
    TextAppend,
    Timestamps,
    Usage,
    WarningMessage,
    WordTimestamp,
    decode_client,
    decode_server,
    encode_client,
    encode_server,
)
from protocol.messages import CLIENT_MESSAGE_TYPES, SERVER_MESSAGE_TYPES

FULL_FORMAT = OutputFormat(
    encoding="opus", sample_rate=48000, container="ogg", bitrate=32000, frame_ms=20
)

CLIENT_SAMPLES = [
    SessionUpdate(),
    SessionUpdate(
        model="qwen3-tts",
        voice="vivian",
        language="en",
        speed=1.25,
        instructions="calm",
        output_format=FULL_FORMAT,
        audio_transport="base64",
        timestamps="word",
        idle_timeout_s=30.0,
        event_id="ev1",
    ),
    ContextCreate(context_id="c1"),
    ContextCreate(
        context_id="turn-1:a.b_c",
        voice="ryan",
        language="de",
        speed=0.5,
        instructions="whisper",
        output_format=OutputFormat(encoding="pcm_f32le", sample_rate=16000),
        ref_audio="UklGRg==",
        ref_text="hello",
        buffer=BufferConfig(mode="manual", max_delay_ms=250),
        event_id="ev2",
    ),
    ContextCreate(context_id="c2", speaker_embedding=[0.5, -1.0, 2.0]),
    TextAppend(context_id="c1", text="Hello, "),
    TextAppend(context_id="c1", text="wörld ✓\n", flush=True, event_id="e"),
    ContextFlush(context_id="c1"),
    ContextFlush(context_id="c1", flush_id="f7"),
    ContextEnd(context_id="c1"),
    ContextCancel(context_id="c1"),
    ContextCancel(context_id="c1", played_ms=1234),
    Keepalive(),
    SessionClose(event_id="bye"),
]

SERVER_SAMPLES = [
    SessionCreated(
        session_id="s-1",
        protocol_version=PROTOCOL_VERSION,
        session=SessionSettings(model="piper", voice="joe", idle_timeout_s=60.0),
        limits=Limits(),
    ),
    SessionUpdated(session=SessionSettings(output_format=FULL_FORMAT, timestamps="word")),
    SessionUpdated(session=SessionSettings(), event_id="ev1"),
    ContextCreated(context_id="c1", stream=3),
    AudioMessage(context_id="c1", seq=0, audio=b"\x00\x01\xff\xfe"),
    Timestamps(
        context_id="c1",
        words=[
            WordTimestamp(text="Hello", start_ms=0, end_ms=320, char_start=0, char_end=5),
            WordTimestamp(text="world", start_ms=330, end_ms=700, char_start=7, char_end=12),
        ],
    ),
    ContextFlushed(context_id="c1", audio_ms=480),
    ContextFlushed(context_id="c1", flush_id="f7", audio_ms=480),
    ContextDone(context_id="c1", audio_ms=2000, usage=Usage(chars=12)),
    ContextDone(context_id="c1", audio_ms=2000, usage=Usage(chars=12, frames=25)),
    ContextCancelled(context_id="c1", audio_sent_ms=640, last_seq=7),
    ContextCancelled(context_id="c1", audio_sent_ms=0, last_seq=None),
    WarningMessage(code="max_frames_reached", message="cut"),
    WarningMessage(code="max_frames_reached", message="cut", context_id="c1"),
    ErrorMessage(code="unknown_context", message="no", fatal=False),
    ErrorMessage(
        code="invalid_field",
        message="bad",
        fatal=True,
        param="output_format.sample_rate",
        event_id="ev3",
        context_id="c1",
    ),
]


def _tag(msg) -> str:
    return type(msg).__struct_config__.tag


@pytest.mark.parametrize("msg", CLIENT_SAMPLES, ids=repr)
def test_client_message_round_trip(msg):
    text = encode_client(msg)
    assert json.loads(text)["type"] == _tag(msg)
    assert decode_client(text) == msg


@pytest.mark.parametrize("msg", SERVER_SAMPLES, ids=repr)
def test_server_message_round_trip(msg):
    text = encode_server(msg)
    assert json.loads(text)["type"] == _tag(msg)
    assert decode_server(text) == msg


def test_samples_cover_every_message_type():
    assert {type(m) for m in CLIENT_SAMPLES} == set(CLIENT_MESSAGE_TYPES)
    assert {type(m) for m in SERVER_SAMPLES} == set(SERVER_MESSAGE_TYPES)


def test_wire_type_strings_match_protocol_md():
    assert [t.__struct_config__.tag for t in CLIENT_MESSAGE_TYPES] == [
        "session.update",
        "context.create",
        "text.append",
        "context.flush",
        "context.end",
        "context.cancel",
        "keepalive",
        "session.close",
    ]
    assert [t.__struct_config__.tag for t in SERVER_MESSAGE_TYPES] == [
        "session.created",
        "session.updated",
        "context.created",
        "audio",
        "timestamps",
        "context.flushed",
        "context.done",
        "context.cancelled",
        "warning",
        "error",
    ]


def test_unset_optional_fields_are_left_out():
    assert json.loads(encode_client(TextAppend(context_id="c", text="hi"))) == {
        "type": "text.append",
        "context_id": "c",
        "text": "hi",
    }
    assert json.loads(encode_client(Keepalive())) == {"type": "keepalive"}
    assert json.loads(encode_server(ErrorMessage(code="x", message="m", fatal=False))) == {
        "type": "error",
        "code": "x",
        "message": "m",
        "fatal": False,
    }


def test_required_nullable_and_default_valued_fields_are_always_sent():
    cancelled = json.loads(
        encode_server(ContextCancelled(context_id="c", audio_sent_ms=0, last_seq=None))
    )
    assert cancelled == {
        "type": "context.cancelled",
        "context_id": "c",
        "audio_sent_ms": 0,
        "last_seq": None,
    }
    created = json.loads(encode_server(SERVER_SAMPLES[0]))
    assert created["protocol_version"] == 1
    # The effective settings are spelled out in full, defaults included.
    assert created["session"] == {
        "model": "piper",
        "voice": "joe",
        "language": None,
        "speed": 1.0,
        "instructions": None,
        "output_format": {
            "encoding": "pcm_s16le",
            "sample_rate": 24000,
            "container": "raw",
            "bitrate": None,
            "frame_ms": None,
        },
        "audio_transport": "binary",
        "timestamps": "none",
        "idle_timeout_s": 60.0,
        # Extensions (docs/protocol-extensions.md): spelled out too, null when unset.
        "options": {},
        "temperature": None,
        "top_k": None,
        "top_p": None,
        "repetition_penalty": None,
        "seed": None,
        "max_new_tokens": None,
        "streaming_text": None,
    }
    assert created["limits"] == {
        "max_contexts": 8,
        "max_text_chars": 100000,
        "idle_timeout_s": 60.0,
        "max_message_bytes": 4 * 1024 * 1024,
    }


def test_documented_defaults():
    fmt = OutputFormat()
    assert (fmt.encoding, fmt.sample_rate, fmt.container, fmt.bitrate, fmt.frame_ms) == (
        "pcm_s16le",
        24000,
        "raw",
        None,
        None,
    )
    assert BufferConfig() == BufferConfig(mode="auto", max_delay_ms=None)
    settings = SessionSettings()
    assert (settings.speed, settings.audio_transport, settings.timestamps) == (
        1.0,
        "binary",
        "none",
    )
    assert TextAppend(context_id="c", text="").flush is False


def test_audio_message_carries_base64_on_the_wire():
    text = encode_server(AudioMessage(context_id="c", seq=4, audio=b"abc"))
    assert json.loads(text) == {"type": "audio", "context_id": "c", "seq": 4, "audio": "YWJj"}


def test_spec_shaped_json_decodes():
    msg = decode_client(
        '{"type": "context.create", "context_id": "c9", "voice": "v",'
        ' "output_format": {"encoding": "pcm_mulaw", "sample_rate": 8000},'
        ' "buffer": {"mode": "manual"}}'
    )
    assert msg == ContextCreate(
        context_id="c9",
        voice="v",
        output_format=OutputFormat(encoding="pcm_mulaw", sample_rate=8000),
        buffer=BufferConfig(mode="manual"),
    )
    assert decode_client(b'{"type":"session.update","speed":2}') == SessionUpdate(speed=2.0)


def test_unknown_extra_fields_are_ignored_both_directions():
    assert decode_client(
        '{"type":"text.append","context_id":"c","text":"x","future":{"a":1},"n":3}'
    ) == TextAppend(context_id="c", text="x")
    assert decode_client(
        '{"type":"session.update","output_format":{"encoding":"opus","later":true}}'
    ) == SessionUpdate(output_format=OutputFormat(encoding="opus"))
    assert decode_server(
        '{"type":"context.created","context_id":"c","stream":1,"new_field":"x"}'
    ) == ContextCreated(context_id="c", stream=1)


def test_type_field_may_come_last():
    assert decode_client('{"context_id":"c","text":"x","type":"text.append"}') == TextAppend(
        context_id="c", text="x"
    )
