"""ClientSession maps frames back to contexts, driven by a real ServerSession."""

import json

import pytest

from protocol import (
    AudioMessage,
    ClientSession,
    ContextCreated,
    ContextDone,
    ErrorCode,
    Limits,
    ProtocolError,
    ServerSession,
    SessionCreated,
    SessionSettings,
    SessionUpdated,
    Usage,
    pack_audio,
)


def pair() -> tuple[ServerSession, ClientSession]:
    server = ServerSession(Limits(max_contexts=4), SessionSettings(voice="v"))
    client = ClientSession()
    [msg] = client.receive_text(server.created_message("s1"))
    assert isinstance(msg, SessionCreated)
    return server, client


def open_ctx(server: ServerSession, client: ClientSession, cid: str) -> int:
    server.receive_text(json.dumps({"type": "context.create", "context_id": cid}))
    [msg] = client.receive_text(server.context_created(cid))
    assert isinstance(msg, ContextCreated)
    return msg.stream


def test_session_created_is_remembered():
    server, client = pair()
    assert client.session_id == "s1"
    assert client.settings == server.settings
    assert client.limits == Limits(max_contexts=4)
    server.receive_text('{"type":"session.update","voice":"w"}')
    [msg] = client.receive_text(server.updated_message())
    assert isinstance(msg, SessionUpdated)
    assert client.settings.voice == "w"


def test_frames_map_back_to_their_context():
    server, client = pair()
    open_ctx(server, client, "a")
    open_ctx(server, client, "b")
    fa0 = client.receive_bytes(server.audio_frame("a", b"a0"))
    fb0 = client.receive_bytes(server.audio_frame("b", b"b0", flush_end=True))
    fa1 = client.receive_bytes(server.audio_frame("a", b"a1", context_end=True))
    assert (fa0.context_id, fa0.seq, fa0.payload) == ("a", 0, b"a0")
    assert (fb0.context_id, fb0.seq, fb0.flush_end, fb0.context_end) == ("b", 0, True, False)
    assert (fa1.context_id, fa1.seq, fa1.context_end) == ("a", 1, True)


def test_stream_reused_after_done_maps_to_the_new_context():
    server, client = pair()
    stream = open_ctx(server, client, "a")
    server.receive_text('{"type":"context.end","context_id":"a"}')
    client.receive_bytes(server.audio_frame("a", b"x", context_end=True))
    [done] = client.receive_text(server.context_done("a", 20, Usage(chars=1)))
    assert isinstance(done, ContextDone)
    assert client.stream_of("a") is None
    assert open_ctx(server, client, "b") == stream
    frame = client.receive_bytes(server.audio_frame("b", b"y"))
    assert (frame.context_id, frame.seq) == ("b", 0)


def test_frame_of_a_cancelled_context_is_unknown():
    server, client = pair()
    stream = open_ctx(server, client, "a")
    client.receive_bytes(server.audio_frame("a", b"x"))
    server.receive_text('{"type":"context.cancel","context_id":"a"}')
    client.receive_text(server.context_cancelled("a", 20))
    with pytest.raises(ProtocolError) as info:
        client.receive_bytes(pack_audio(stream, 1, 0, b"late"))
    assert info.value.code is ErrorCode.UNKNOWN_CONTEXT


def test_unannounced_stream_and_bad_frames():
    _, client = pair()
    with pytest.raises(ProtocolError) as info:
        client.receive_bytes(pack_audio(9, 0, 0, b""))
    assert info.value.code is ErrorCode.UNKNOWN_CONTEXT
    with pytest.raises(ProtocolError) as info:
        client.receive_bytes(b"\x01\x00")
    assert info.value.code is ErrorCode.INVALID_FRAME


def test_seq_gap_is_reported():
    server, client = pair()
    stream = open_ctx(server, client, "a")
    client.receive_bytes(pack_audio(stream, 0, 0, b""))
    with pytest.raises(ProtocolError) as info:
        client.receive_bytes(pack_audio(stream, 2, 0, b""))
    assert info.value.code is ErrorCode.INVALID_FRAME
    assert info.value.context_id == "a"
    # It resynchronises on the frame it got.
    assert client.receive_bytes(pack_audio(stream, 3, 0, b"")).seq == 3


def test_base64_audio_is_checked_too():
    server, client = pair()
    open_ctx(server, client, "a")
    [msg] = client.receive_text(server.audio_message("a", b"\x00\x01"))
    assert msg == AudioMessage(context_id="a", seq=0, audio=b"\x00\x01")
    with pytest.raises(ProtocolError):
        client.receive_text('{"type":"audio","context_id":"a","seq":5,"audio":""}')


def test_malformed_server_message_raises():
    _, client = pair()
    with pytest.raises(ProtocolError) as info:
        client.receive_text('{"type":"context.created"}')
    assert info.value.code is ErrorCode.MISSING_FIELD
