"""Every decoding failure maps to a stable error code and names the field."""

import pytest

from protocol import (
    ContextCreate,
    ErrorCode,
    OutputFormat,
    ProtocolError,
    SessionUpdate,
    TextAppend,
    decode_client,
    decode_server,
    encode_server,
    error_to_message,
)

E = ErrorCode


def _fails(data) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        decode_client(data)
    return info.value


@pytest.mark.parametrize(
    "data",
    [
        "{bad",
        "",
        "   ",
        '{"type":"keepalive"} trailing',
        b"\xff\xfe",
        '"\ud800"',  # lone surrogate: not UTF-8 text
        "[1, 2]",
        "42",
        '"text.append"',
        "null",
        "true",
    ],
)
def test_invalid_json_and_non_objects(data):
    err = _fails(data)
    assert err.code is E.INVALID_JSON
    assert err.fatal is False


def test_non_object_message_says_what_it_got():
    assert "array" in _fails("[1]").message


@pytest.mark.parametrize(
    "data",
    [
        "{}",
        '{"context_id":"c","text":"x"}',
        '{"type":"nope"}',
        '{"type":"TEXT.APPEND"}',
        '{"type":"audio"}',  # a server message type is not a client message
        '{"type":5}',
        '{"type":null}',
        '{"type":["text.append"]}',
    ],
)
def test_unknown_or_missing_type(data):
    err = _fails(data)
    assert err.code is E.UNKNOWN_TYPE
    assert err.param == "type"
    assert "text.append" in err.message  # lists the known types


@pytest.mark.parametrize(
    ("data", "param"),
    [
        ('{"type":"text.append","context_id":"c"}', "text"),
        ('{"type":"text.append","text":"x"}', "context_id"),
        ('{"type":"context.create"}', "context_id"),
        ('{"type":"context.flush"}', "context_id"),
        ('{"type":"context.end"}', "context_id"),
        ('{"type":"context.cancel"}', "context_id"),
    ],
)
def test_missing_field(data, param):
    err = _fails(data)
    assert err.code is E.MISSING_FIELD
    assert err.param == param
    assert param in err.message


def _update(**fields) -> str:
    import json

    return json.dumps({"type": "session.update", **fields})


def _create(**fields) -> str:
    import json

    return json.dumps({"type": "context.create", "context_id": "c", **fields})


@pytest.mark.parametrize(
    ("data", "param"),
    [
        ('{"type":"text.append","context_id":"c","text":5}', "text"),
        ('{"type":"text.append","context_id":"c","text":null}', "text"),
        ('{"type":"text.append","context_id":"c","text":"x","flush":"yes"}', "flush"),
        ('{"type":"text.append","context_id":"c","text":"x","flush":1}', "flush"),
        ('{"type":"text.append","context_id":7,"text":"x"}', "context_id"),
        ('{"type":"text.append","context_id":"","text":"x"}', "context_id"),
        ('{"type":"text.append","context_id":"a b","text":"x"}', "context_id"),
        ('{"type":"text.append","context_id":"a/b","text":"x"}', "context_id"),
        ('{"type":"text.append","context_id":"é","text":"x"}', "context_id"),
        ('{"type":"text.append","context_id":"' + "a" * 129 + '","text":"x"}', "context_id"),
        ('{"type":"context.flush","context_id":"c","flush_id":3}', "flush_id"),
        ('{"type":"context.cancel","context_id":"c","played_ms":-1}', "played_ms"),
        ('{"type":"context.cancel","context_id":"c","played_ms":1.5}', "played_ms"),
        ('{"type":"text.append","context_id":"c","text":"x","event_id":9}', "event_id"),
        (_update(speed="fast"), "speed"),
        (_update(speed=True), "speed"),
        (_update(speed=0.2), "speed"),
        (_update(speed=4.01), "speed"),
        (_update(speed=0), "speed"),
        (_update(model=1), "model"),
        (_update(idle_timeout_s=0), "idle_timeout_s"),
        (_update(idle_timeout_s="10"), "idle_timeout_s"),
        (_update(output_format=5), "output_format"),
        (_update(output_format={"sample_rate": "24000"}), "output_format.sample_rate"),
        (_update(output_format={"sample_rate": 24000.5}), "output_format.sample_rate"),
        (_update(output_format={"encoding": 1}), "output_format.encoding"),
        (_update(output_format={"encoding": "opus", "bitrate": 10}), "output_format.bitrate"),
        (_update(output_format={"frame_ms": "20"}), "output_format.frame_ms"),
        (_create(speaker_embedding=[1.0, "x"]), "speaker_embedding[1]"),
        (_create(speaker_embedding="abc"), "speaker_embedding"),
        (_create(buffer={"max_delay_ms": -5}), "buffer.max_delay_ms"),
        (_create(buffer=[]), "buffer"),
        (_create(ref_audio="UklGRg==", speaker_embedding=[1.0]), "speaker_embedding"),
    ],
)
def test_invalid_field_names_the_field(data, param):
    err = _fails(data)
    assert err.code is E.INVALID_FIELD
    assert err.param == param
    assert param.split("[")[0] in err.message


@pytest.mark.parametrize(
    ("data", "param", "allowed"),
    [
        (_update(output_format={"encoding": "mp3"}), "output_format.encoding", "pcm_alaw"),
        (_update(output_format={"sample_rate": 11025}), "output_format.sample_rate", "22050"),
        (_update(output_format={"container": "mp4"}), "output_format.container", "ogg"),
        (_update(output_format={"frame_ms": 30}), "output_format.frame_ms", "60"),
        (_update(audio_transport="hex"), "audio_transport", "base64"),
        (_update(timestamps="char"), "timestamps", "word"),
        (_create(buffer={"mode": "lazy"}), "buffer.mode", "manual"),
        (_create(output_format={"encoding": "zip"}), "output_format.encoding", "opus"),
        # Opus has its own set of rates, PCM another; Ogg carries only Opus.
        (
            _update(output_format={"encoding": "opus", "sample_rate": 22050}),
            "output_format.sample_rate",
            "12000",
        ),
        (
            _create(output_format={"encoding": "opus", "sample_rate": 44100}),
            "output_format.sample_rate",
            "12000",
        ),
        (_update(output_format={"sample_rate": 12000}), "output_format.sample_rate", "44100"),
        (_update(output_format={"container": "ogg"}), "output_format.container", "raw"),
    ],
)
def test_unsupported_value_lists_allowed_values(data, param, allowed):
    err = _fails(data)
    assert err.code is E.UNSUPPORTED_VALUE
    assert err.param == param
    assert param in err.message
    assert allowed in err.message


def test_opus_specific_error_lists_only_opus_rates():
    err = _fails(_update(output_format={"encoding": "opus", "sample_rate": 22050}))
    assert "8000, 12000, 16000, 24000, 48000" in err.message
    assert "44100" not in err.message


@pytest.mark.parametrize(
    "data",
    [
        _update(speed=0.25),
        _update(speed=4.0),
        _update(speed=1),
        _update(idle_timeout_s=0.5),
        _update(output_format={"encoding": "opus", "sample_rate": 12000, "container": "ogg"}),
        _update(output_format={"encoding": "pcm_alaw", "sample_rate": 8000, "frame_ms": 10}),
        _update(output_format={"encoding": "pcm_f32le", "sample_rate": 44100}),
        '{"type":"text.append","context_id":"' + "a" * 128 + '","text":""}',
        '{"type":"text.append","context_id":"A-z_0.9:x","text":""}',
        '{"type":"session.update","speed":null,"model":null}',
    ],
)
def test_boundary_values_are_accepted(data):
    decode_client(data)


@pytest.mark.parametrize(
    ("data", "event_id", "context_id"),
    [
        ('{"type":"text.append","context_id":"c1","text":5,"event_id":"e1"}', "e1", "c1"),
        ('{"type":"bogus","context_id":"c2","event_id":"e2"}', "e2", "c2"),
        ('{"type":"context.create","context_id":7,"event_id":"e3"}', "e3", None),
        (
            _create(event_id="e4", output_format={"encoding": "opus", "sample_rate": 44100}),
            "e4",
            "c",
        ),
        ('{"type":"text.append","context_id":"c","text":1,"event_id":5}', None, "c"),
    ],
)
def test_errors_carry_event_id_and_context_id(data, event_id, context_id):
    err = _fails(data)
    assert (err.event_id, err.context_id) == (event_id, context_id)


def test_output_format_is_replaced_whole_with_defaults():
    msg = decode_client(_update(output_format={"encoding": "pcm_f32le"}))
    assert isinstance(msg, SessionUpdate)
    assert msg.output_format == OutputFormat(encoding="pcm_f32le", sample_rate=24000)


def test_decoded_types():
    assert isinstance(decode_client(_create()), ContextCreate)
    assert isinstance(
        decode_client('{"type":"text.append","context_id":"c","text":""}'), TextAppend
    )


@pytest.mark.parametrize(
    ("data", "code", "param"),
    [
        ("nope", E.INVALID_JSON, None),
        ("[]", E.INVALID_JSON, None),
        ('{"type":"text.append"}', E.UNKNOWN_TYPE, "type"),
        ('{"type":"context.created","context_id":"c"}', E.MISSING_FIELD, "stream"),
        ('{"type":"context.created","context_id":"c","stream":"1"}', E.INVALID_FIELD, "stream"),
        ('{"type":"audio","context_id":"c","seq":0,"audio":"***"}', E.INVALID_FIELD, "audio"),
        (
            '{"type":"timestamps","context_id":"c","words":[{"text":"a"}]}',
            E.MISSING_FIELD,
            "words[0].start_ms",
        ),
    ],
)
def test_decode_server_errors(data, code, param):
    with pytest.raises(ProtocolError) as info:
        decode_server(data)
    assert info.value.code is code
    assert info.value.param == param


def test_error_to_message():
    err = ProtocolError(E.TEXT_TOO_LONG, "long", param="text", context_id="c", event_id="e")
    msg = error_to_message(err)
    assert (msg.code, msg.message, msg.param, msg.context_id, msg.event_id, msg.fatal) == (
        "text_too_long",
        "long",
        "text",
        "c",
        "e",
        False,
    )


# --- hostile values: every error is encodable and short --------------------------


@pytest.mark.parametrize(
    ("data", "param"),
    [
        (r'{"type":"context.cancel","context_id":"a\ud800","event_id":"e1"}', "context_id"),
        (r'{"type":"keepalive","event_id":"e1\ud800"}', "event_id"),
        (r'{"type":"text.append","context_id":"a","text":"ok","flush_id":"f\udc00"}', "flush_id"),
        (r'{"type":"keepalive","x":{"k\ud800":1}}', "x"),
    ],
)
def test_lone_surrogates_anywhere_are_field_errors_that_encode(data, param):
    err = _fails(data)
    assert (err.code, err.param) == (E.INVALID_FIELD, param)
    encoded = encode_server(error_to_message(err))  # would raise on a surrogate
    assert "\\ud8" not in encoded and "\\udc" not in encoded


def test_context_ids_may_not_end_in_a_newline():
    err = _fails('{"type":"context.create","context_id":"a\\n"}')
    assert (err.code, err.param) == (E.INVALID_FIELD, "context_id")


@pytest.mark.parametrize(
    "data",
    [
        '{"type":"' + "t" * 10_000 + '","event_id":"e"}',
        '{"type":"context.create","context_id":"a","output_format":{"encoding":"'
        + "x" * 10_000
        + '"}}',
        '{"type":"keepalive","event_id":"' + "e" * 10_000 + '"}',
    ],
)
def test_errors_do_not_repeat_long_values(data):
    err = _fails(data)
    assert len(encode_server(error_to_message(err))) < 600
