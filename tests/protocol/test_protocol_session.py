"""ServerSession: events for client input, context lifecycle, limits and framing."""

import json
import struct

import pytest

from protocol import (
    BufferConfig,
    CancelRequested,
    CloseRequested,
    ContextOpened,
    ContextSettings,
    ContextState,
    EndRequested,
    ErrorCode,
    ErrorEvent,
    FlushRequested,
    KeepaliveReceived,
    Limits,
    OutputFormat,
    ProtocolError,
    ServerSession,
    SessionSettings,
    SettingsUpdated,
    TextAppended,
    Usage,
    WordTimestamp,
)

E = ErrorCode
DEFAULTS = SessionSettings(model="m", voice="v", language="en")


def make(
    max_contexts: int = 3,
    max_text_chars: int = 20,
    max_message_bytes: int = 1000,
    defaults: SessionSettings = DEFAULTS,
    **kwargs,
) -> ServerSession:
    limits = Limits(
        max_contexts=max_contexts,
        max_text_chars=max_text_chars,
        idle_timeout_s=30.0,
        max_message_bytes=max_message_bytes,
    )
    return ServerSession(limits, defaults, **kwargs)


def send(session: ServerSession, type_: str, **fields):
    return session.receive_text(json.dumps({"type": type_, **fields}))


def error_of(events) -> ProtocolError:
    assert len(events) == 1 and isinstance(events[0], ErrorEvent), events
    return events[0].error


def create(session, cid, **fields):
    events = send(session, "context.create", context_id=cid, **fields)
    assert isinstance(events[0], ContextOpened), events
    return events[0]


# --- accepted messages ------------------------------------------------------------


def test_each_accepted_message_gives_its_event():
    s = make()
    opened = create(s, "a", event_id="e0")
    assert opened == ContextOpened(
        "a", 0, ContextSettings(model="m", voice="v", language="en"), False, "e0"
    )
    assert send(s, "text.append", context_id="a", text="Hi ") == [TextAppended("a", "Hi ", False)]
    assert send(s, "text.append", context_id="a", text="x", flush=True) == [
        TextAppended("a", "x", True)
    ]
    assert send(s, "context.flush", context_id="a", flush_id="f1") == [FlushRequested("a", "f1")]
    assert send(s, "context.flush", context_id="a") == [FlushRequested("a", None)]
    assert send(s, "keepalive") == [KeepaliveReceived()]
    assert send(s, "context.end", context_id="a") == [EndRequested("a")]
    assert s.context_state("a") is ContextState.ENDING
    create(s, "b")
    assert send(s, "context.cancel", context_id="b", played_ms=120) == [CancelRequested("b", 120)]
    assert s.context_state("b") is ContextState.CANCELLING
    assert send(s, "context.cancel", context_id="a") == [CancelRequested("a", None)]


def test_first_text_append_opens_the_context_with_session_defaults():
    s = make()
    events = send(s, "text.append", context_id="new", text="Hello", event_id="e1")
    assert events == [
        ContextOpened("new", 0, ContextSettings(model="m", voice="v", language="en"), True, "e1"),
        TextAppended("new", "Hello", False),
    ]
    assert s.context_state("new") is ContextState.OPEN
    assert json.loads(s.context_created("new")) == {
        "type": "context.created",
        "context_id": "new",
        "stream": 0,
    }


def test_session_update_merges_and_answers():
    s = make()
    events = send(s, "session.update", voice="w", speed=1.5, event_id="u1")
    assert len(events) == 1 and isinstance(events[0], SettingsUpdated)
    assert events[0].event_id == "u1"
    assert events[0].settings == s.settings
    assert (s.settings.model, s.settings.voice, s.settings.language, s.settings.speed) == (
        "m",
        "w",
        "en",
        1.5,
    )
    send(s, "session.update", output_format={"encoding": "opus", "sample_rate": 48000})
    assert s.settings.voice == "w"  # untouched by a later update
    assert s.settings.output_format == OutputFormat(encoding="opus", sample_rate=48000)
    updated = json.loads(s.updated_message("u1"))
    assert updated["type"] == "session.updated"
    assert updated["event_id"] == "u1"
    assert updated["session"]["voice"] == "w"
    assert updated["session"]["output_format"]["encoding"] == "opus"


def test_context_create_overrides_only_that_context():
    s = make()
    send(s, "session.update", speed=2.0, instructions="calm")
    opened = create(
        s,
        "a",
        voice="x",
        output_format={"encoding": "pcm_mulaw", "sample_rate": 8000},
        ref_audio="UklGRg==",
        ref_text="ref",
        buffer={"mode": "manual", "max_delay_ms": 100},
    )
    assert opened.settings == ContextSettings(
        model="m",
        voice="x",
        language="en",
        speed=2.0,
        instructions="calm",
        output_format=OutputFormat(encoding="pcm_mulaw", sample_rate=8000),
        ref_audio="UklGRg==",
        ref_text="ref",
        buffer=BufferConfig(mode="manual", max_delay_ms=100),
    )
    assert s.settings.voice == "v"
    assert s.settings.output_format == OutputFormat()
    # A later session.update does not reach a context already open.
    send(s, "session.update", voice="late")
    assert s.context_settings("a").voice == "x"
    assert create(s, "b").settings.voice == "late"


def test_idle_timeout_defaults_to_the_limit_and_cannot_exceed_it():
    s = make()
    assert s.settings.idle_timeout_s == 30.0
    err = error_of(send(s, "session.update", idle_timeout_s=31, event_id="u"))
    assert (err.code, err.param, err.event_id) == (E.INVALID_FIELD, "idle_timeout_s", "u")
    assert s.settings.idle_timeout_s == 30.0
    send(s, "session.update", idle_timeout_s=5)
    assert s.settings.idle_timeout_s == 5.0


def test_invalid_default_output_format_is_refused():
    with pytest.raises(ProtocolError) as info:
        make(
            defaults=SessionSettings(output_format=OutputFormat(encoding="opus", sample_rate=44100))
        )
    assert info.value.code is E.UNSUPPORTED_VALUE


# --- rejected input ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "code"),
    [
        ("{oops", E.INVALID_JSON),
        ("[1]", E.INVALID_JSON),
        ('{"type":"nope"}', E.UNKNOWN_TYPE),
        ('{"type":"text.append","context_id":"a"}', E.MISSING_FIELD),
        ('{"type":"text.append","context_id":"a","text":3}', E.INVALID_FIELD),
        ('{"type":"session.update","output_format":{"encoding":"mp3"}}', E.UNSUPPORTED_VALUE),
    ],
)
def test_codec_errors_become_non_fatal_error_events(data, code):
    s = make()
    create(s, "keep")
    err = error_of(s.receive_text(data))
    assert err.code is code
    assert err.fatal is False
    assert s.context_state("keep") is ContextState.OPEN
    assert s.context_state("a") is None


def _to_state(s: ServerSession, cid: str, state: str) -> None:
    create(s, cid)
    if state == "ending":
        send(s, "context.end", context_id=cid)
    elif state == "cancelling":
        send(s, "context.cancel", context_id=cid)
    elif state == "done":
        send(s, "context.end", context_id=cid)
        s.context_done(cid, 100, Usage(chars=1))
    elif state == "done_early":  # the server finished it on its own
        s.context_done(cid, 100, Usage(chars=1))
    elif state == "cancelled":
        send(s, "context.cancel", context_id=cid)
        s.context_cancelled(cid, 0)
    elif state == "server_cancelled":
        s.context_cancelled(cid, 0)


ALL_STATES = ["ending", "cancelling", "done", "done_early", "cancelled", "server_cancelled"]


@pytest.mark.parametrize("state", ALL_STATES)
@pytest.mark.parametrize(
    ("type_", "fields"),
    [
        ("text.append", {"text": "more"}),
        ("context.flush", {"flush_id": "f"}),
        ("context.end", {}),
    ],
)
def test_text_flush_end_after_end_or_finish_is_context_closed(state, type_, fields):
    s = make()
    _to_state(s, "a", state)
    create(s, "other")
    send(s, "text.append", context_id="other", text="abc")
    err = error_of(send(s, type_, context_id="a", event_id="ev", **fields))
    assert (err.code, err.context_id, err.event_id, err.fatal) == (
        E.CONTEXT_CLOSED,
        "a",
        "ev",
        False,
    )
    # The other context is untouched and keeps working.
    assert s.context_state("other") is ContextState.OPEN
    assert send(s, "text.append", context_id="other", text="d") == [
        TextAppended("other", "d", False)
    ]


@pytest.mark.parametrize("type_", ["context.flush", "context.end", "context.cancel"])
def test_flush_end_cancel_of_unknown_id(type_):
    s = make()
    err = error_of(send(s, type_, context_id="ghost", event_id="e"))
    assert (err.code, err.context_id, err.event_id, err.param) == (
        E.UNKNOWN_CONTEXT,
        "ghost",
        "e",
        "context_id",
    )
    assert s.context_state("ghost") is None


@pytest.mark.parametrize("state", ["open", "ending", "cancelling"])
def test_create_of_an_unfinished_id_is_context_exists(state):
    s = make()
    if state == "open":
        create(s, "a")
    else:
        _to_state(s, "a", state)
    err = error_of(send(s, "context.create", context_id="a", event_id="e"))
    assert (err.code, err.context_id, err.event_id) == (E.CONTEXT_EXISTS, "a", "e")


@pytest.mark.parametrize("state", ["done", "done_early", "cancelled", "server_cancelled"])
def test_finished_id_may_be_created_again(state):
    s = make()
    _to_state(s, "a", state)
    opened = create(s, "a")
    assert s.context_state("a") is ContextState.OPEN
    assert send(s, "text.append", context_id="a", text="again") == [
        TextAppended("a", "again", False)
    ]
    frame = s.audio_frame("a", b"x")
    assert struct.unpack_from("<BBHI", frame) == (1, 0, opened.stream, 0)  # seq restarts


@pytest.mark.parametrize("state", ["cancelling", "done", "cancelled"])
def test_cancel_of_a_cancelling_or_finished_context_is_a_no_op(state):
    s = make()
    _to_state(s, "a", state)
    assert send(s, "context.cancel", context_id="a") == []


def test_too_many_contexts_explicit_and_implicit():
    s = make(max_contexts=2)
    create(s, "a")
    _to_state(s, "b", "ending")  # ending still counts
    err = error_of(send(s, "context.create", context_id="c", event_id="e"))
    assert (err.code, err.context_id, err.event_id) == (E.TOO_MANY_CONTEXTS, "c", "e")
    err = error_of(send(s, "text.append", context_id="d", text="x"))
    assert (err.code, err.context_id) == (E.TOO_MANY_CONTEXTS, "d")
    assert s.context_state("c") is None and s.context_state("d") is None
    assert s.live_contexts == 2
    assert send(s, "text.append", context_id="a", text="still fine") == [
        TextAppended("a", "still fine", False)
    ]


def test_cancel_frees_the_context_slot_at_once():
    s = make(max_contexts=1)
    create(s, "a")
    assert error_of(send(s, "context.create", context_id="b")).code is E.TOO_MANY_CONTEXTS
    send(s, "context.cancel", context_id="a")
    # Before the server even answered context.cancelled:
    assert s.live_contexts == 0
    create(s, "b")
    assert s.context_state("a") is ContextState.CANCELLING


def test_done_frees_the_context_slot():
    s = make(max_contexts=1)
    _to_state(s, "a", "done")
    create(s, "b")


def test_text_limit_is_per_context_and_accumulated():
    s = make(max_text_chars=10)
    assert send(s, "text.append", context_id="a", text="12345")[1] == TextAppended(
        "a", "12345", False
    )
    assert send(s, "text.append", context_id="a", text="67890") == [
        TextAppended("a", "67890", False)
    ]  # exactly at the limit
    err = error_of(send(s, "text.append", context_id="a", text="x", event_id="e"))
    assert (err.code, err.context_id, err.event_id, err.param) == (
        E.TEXT_TOO_LONG,
        "a",
        "e",
        "text",
    )
    assert s.context_state("a") is ContextState.OPEN
    assert send(s, "text.append", context_id="a", text="") == [TextAppended("a", "", False)]
    # Another context has its own budget.
    assert len(send(s, "text.append", context_id="b", text="ñ" * 10)) == 2


def test_rejected_text_does_not_count_and_no_context_opens_for_it():
    s = make(max_text_chars=5)
    err = error_of(send(s, "text.append", context_id="a", text="123456"))
    assert err.code is E.TEXT_TOO_LONG
    assert s.context_state("a") is None
    create(s, "b")
    send(s, "text.append", context_id="b", text="1234")
    assert error_of(send(s, "text.append", context_id="b", text="56")).code is E.TEXT_TOO_LONG
    assert send(s, "text.append", context_id="b", text="5") == [TextAppended("b", "5", False)]


def test_binary_from_client_is_not_allowed():
    s = make()
    create(s, "a")
    err = error_of(s.receive_bytes(b"\x01\x00\x00\x00\x00\x00\x00\x00abc"))
    assert (err.code, err.fatal) == (E.BINARY_NOT_ALLOWED, False)
    assert s.context_state("a") is ContextState.OPEN


@pytest.mark.parametrize(
    "data",
    [
        json.dumps({"type": "text.append", "context_id": "a", "text": "x" * 1000}),
        # 400 chars but 1200 UTF-8 bytes
        json.dumps(
            {"type": "text.append", "context_id": "a", "text": "€" * 400}, ensure_ascii=False
        ),
        b"\x00" * 1001,
    ],
)
def test_oversized_message_is_fatal(data):
    s = make(max_message_bytes=1000)
    events = s.receive_bytes(data) if isinstance(data, bytes) else s.receive_text(data)
    err = error_of(events)
    assert (err.code, err.fatal) == (E.MESSAGE_TOO_BIG, True)
    assert "1000" in err.message


def test_message_at_the_size_limit_is_accepted():
    s = make(max_message_bytes=60)
    head = '{"type":"text.append","context_id":"a","text":"'
    data = head + "x" * (60 - len(head) - 2) + '"}'
    assert len(data.encode()) == 60
    assert isinstance(s.receive_text(data)[1], TextAppended)


def test_session_close_ends_open_contexts_then_closes():
    s = make()
    create(s, "a")
    _to_state(s, "b", "ending")
    _to_state(s, "c", "cancelling")
    assert send(s, "session.close") == [EndRequested("a"), CloseRequested()]
    assert s.closing
    assert s.context_state("a") is ContextState.ENDING
    assert not s.drained
    s.context_done("a", 10, Usage(chars=0))
    s.context_done("b", 10, Usage(chars=0))
    assert not s.drained
    s.context_cancelled("c", 0)
    assert s.drained


@pytest.mark.parametrize(
    "data",
    [
        '{"type":"text.append","context_id":"a","text":"x","event_id":"e"}',
        '{"type":"context.create","context_id":"z","event_id":"e"}',
        '{"type":"context.flush","context_id":"a","event_id":"e"}',
        '{"type":"context.end","context_id":"a","event_id":"e"}',
        '{"type":"context.cancel","context_id":"a","event_id":"e"}',
        '{"type":"session.update","voice":"q","event_id":"e"}',
        '{"type":"keepalive","event_id":"e"}',
        '{"type":"session.close","event_id":"e"}',
        "{not json",
        b"binary",
    ],
)
def test_every_message_after_session_close_is_session_closing(data):
    s = make()
    create(s, "a")
    send(s, "session.close")
    events = s.receive_bytes(data) if isinstance(data, bytes) else s.receive_text(data)
    err = error_of(events)
    assert (err.code, err.fatal) == (E.SESSION_CLOSING, False)
    if isinstance(data, str) and "event_id" in data:
        assert err.event_id == "e"
    assert s.settings.voice == "v"
    assert s.context_state("z") is None


# --- streams ----------------------------------------------------------------------


def test_stream_numbers_are_unique_among_live_contexts_and_reused():
    s = make(max_contexts=10)
    streams = {cid: create(s, cid).stream for cid in "abcd"}
    assert streams == {"a": 0, "b": 1, "c": 2, "d": 3}
    send(s, "context.end", context_id="b")
    s.context_done("b", 0, Usage(chars=0))
    send(s, "context.cancel", context_id="c")
    s.context_cancelled("c", 0)
    assert create(s, "e").stream == 1  # lowest freed number first
    assert create(s, "f").stream == 2
    assert create(s, "g").stream == 4
    live = [s.stream_of(cid) for cid in s.active_context_ids()]
    assert len(live) == len(set(live)) == 5


def test_cancelling_context_keeps_its_stream_until_cancelled():
    s = make()
    create(s, "a")
    send(s, "context.cancel", context_id="a")
    assert create(s, "b").stream == 1
    s.context_cancelled("a", 0)
    assert create(s, "c").stream == 0


# --- output -----------------------------------------------------------------------


def test_audio_frames_count_seq_per_context_with_flags():
    s = make()
    sa = create(s, "a").stream
    sb = create(s, "b").stream
    frames = [
        s.audio_frame("a", b"A0"),
        s.audio_frame("b", b"B0"),
        s.audio_frame("a", b"A1", flush_end=True),
        s.audio_frame("a", b"A2", context_end=True),
        s.audio_frame("b", b"B1", flush_end=True, context_end=True),
    ]
    oracle = [
        struct.pack("<BBHI", 1, 0, sa, 0) + b"A0",
        struct.pack("<BBHI", 1, 0, sb, 0) + b"B0",
        struct.pack("<BBHI", 1, 1, sa, 1) + b"A1",
        struct.pack("<BBHI", 1, 2, sa, 2) + b"A2",
        struct.pack("<BBHI", 1, 3, sb, 1) + b"B1",
    ]
    assert frames == oracle


def test_base64_audio_shares_the_seq_counter():
    s = make()
    create(s, "a")
    s.audio_frame("a", b"x")
    assert json.loads(s.audio_message("a", b"abc")) == {
        "type": "audio",
        "context_id": "a",
        "seq": 1,
        "audio": "YWJj",
    }
    assert struct.unpack_from("<BBHI", s.audio_frame("a", b""))[3] == 2


@pytest.mark.parametrize("state", ALL_STATES[1:])  # every state after a cancel or done
def test_no_audio_after_cancel_or_done(state):
    s = make()
    _to_state(s, "a", state)
    assert not s.can_send_audio("a")
    for send_audio in (lambda: s.audio_frame("a", b"x"), lambda: s.audio_message("a", b"x")):
        with pytest.raises(ProtocolError) as info:
            send_audio()
        assert info.value.code is E.CONTEXT_CLOSED
        assert info.value.context_id == "a"


def test_audio_is_allowed_while_ending_but_not_after_the_last_frame():
    s = make()
    _to_state(s, "a", "ending")
    assert s.can_send_audio("a")
    s.audio_frame("a", b"x", context_end=True)
    assert not s.can_send_audio("a")
    with pytest.raises(ProtocolError):
        s.audio_frame("a", b"y")
    assert json.loads(s.context_done("a", 20, Usage(chars=3, frames=1))) == {
        "type": "context.done",
        "context_id": "a",
        "audio_ms": 20,
        "usage": {"chars": 3, "frames": 1},
    }


def test_output_for_unknown_context_raises_unknown_context():
    s = make()
    for call in (
        lambda: s.audio_frame("nope", b""),
        lambda: s.context_created("nope"),
        lambda: s.context_done("nope", 0, Usage(chars=0)),
        lambda: s.context_cancelled("nope", 0),
        lambda: s.context_flushed("nope", None, 0),
    ):
        with pytest.raises(ProtocolError) as info:
            call()
        assert info.value.code is E.UNKNOWN_CONTEXT
    assert not s.can_send_audio("nope")


@pytest.mark.parametrize("state", ["cancelling", "done", "cancelled"])
def test_done_flushed_timestamps_only_for_live_contexts(state):
    s = make()
    _to_state(s, "a", state)
    for call in (
        lambda: s.context_done("a", 0, Usage(chars=0)),
        lambda: s.context_flushed("a", "f", 0),
        lambda: s.timestamps_message("a", []),
    ):
        with pytest.raises(ProtocolError) as info:
            call()
        assert info.value.code is E.CONTEXT_CLOSED


def test_done_and_cancelled_can_be_sent_only_once():
    s = make()
    _to_state(s, "a", "done")
    with pytest.raises(ProtocolError):
        s.context_cancelled("a", 0)
    _to_state(s, "b", "cancelled")
    with pytest.raises(ProtocolError):
        s.context_cancelled("b", 0)


def test_context_cancelled_reports_the_last_seq():
    s = make()
    create(s, "a")
    send(s, "context.cancel", context_id="a")
    assert json.loads(s.context_cancelled("a", 0)) == {
        "type": "context.cancelled",
        "context_id": "a",
        "audio_sent_ms": 0,
        "last_seq": None,
    }
    create(s, "b")
    for _ in range(3):
        s.audio_frame("b", b"..")
    send(s, "context.cancel", context_id="b")
    assert json.loads(s.context_cancelled("b", 60))["last_seq"] == 2
    assert s.context_state("b") is ContextState.CANCELLED


def test_other_outgoing_messages():
    s = make()
    create(s, "a")
    created = json.loads(s.created_message("sess-1"))
    assert created["type"] == "session.created"
    assert created["session_id"] == "sess-1"
    assert created["protocol_version"] == 1
    assert created["session"]["voice"] == "v"
    assert created["limits"]["max_contexts"] == 3
    assert json.loads(s.context_flushed("a", "f1", 480)) == {
        "type": "context.flushed",
        "context_id": "a",
        "flush_id": "f1",
        "audio_ms": 480,
    }
    word = WordTimestamp(text="Hi", start_ms=0, end_ms=100, char_start=0, char_end=2)
    assert json.loads(s.timestamps_message("a", [word]))["words"] == [
        {"text": "Hi", "start_ms": 0, "end_ms": 100, "char_start": 0, "char_end": 2}
    ]
    err = ProtocolError(E.UNKNOWN_VOICE, "no voice 'q'", param="voice", context_id="a")
    assert json.loads(s.error_message(err)) == {
        "type": "error",
        "code": "unknown_voice",
        "message": "no voice 'q'",
        "param": "voice",
        "context_id": "a",
        "fatal": False,
    }
    assert json.loads(s.warning_message(E.MAX_FRAMES_REACHED, "cut", "a")) == {
        "type": "warning",
        "code": "max_frames_reached",
        "message": "cut",
        "context_id": "a",
    }


def test_finished_ids_are_forgotten_past_the_memory():
    s = make(finished_memory=2)
    for cid in ("a", "b", "c"):
        _to_state(s, cid, "done")
    assert s.context_state("a") is None  # forgotten: a text.append opens it again
    assert s.context_state("c") is ContextState.DONE
    assert isinstance(send(s, "text.append", context_id="a", text="x")[0], ContextOpened)
    assert error_of(send(s, "text.append", context_id="c", text="x")).code is E.CONTEXT_CLOSED
