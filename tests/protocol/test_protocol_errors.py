"""Error and close codes are part of the wire contract: their values never change."""

from protocol import CloseCode, ErrorCode, ProtocolError, close_code_for


def test_error_code_values_are_stable():
    required = {
        "invalid_json",
        "unknown_type",
        "invalid_field",
        "missing_field",
        "unknown_context",
        "context_exists",
        "context_closed",
        "text_too_long",
        "too_many_contexts",
        "binary_not_allowed",
        "message_too_big",
        "unsupported_value",
        "unknown_voice",
        "unknown_model",
        "unsupported_language",
        "session_closing",
        "rate_limited",
        "overloaded",
        "internal_error",
        "max_frames_reached",
        "unauthorized",
        "idle_timeout",
        "slow_reader",
        "invalid_frame",
        "server_shutdown",
        "origin_not_allowed",
        "request_timeout",
        "token_expired",
        "host_not_allowed",
        "missing_host",
        "headers_too_large",
        "engine_failed",
    }
    assert {c.value for c in ErrorCode} == required
    for code in ErrorCode:
        assert code.value == code.name.lower()
        assert code == code.value  # compares equal to the wire string


def test_close_code_values():
    assert {c.value for c in CloseCode} == {1000, 1008, 1009, 1011, 1012, 1013, 4001, 4008}
    assert CloseCode.MESSAGE_TOO_BIG == 1009
    assert CloseCode.IDLE_TIMEOUT == 4008


def test_close_code_for_fatal_errors():
    assert close_code_for(ErrorCode.MESSAGE_TOO_BIG) is CloseCode.MESSAGE_TOO_BIG
    assert close_code_for(ErrorCode.UNAUTHORIZED) is CloseCode.UNAUTHORIZED
    assert close_code_for(ErrorCode.IDLE_TIMEOUT) is CloseCode.IDLE_TIMEOUT
    assert close_code_for(ErrorCode.INTERNAL_ERROR) is CloseCode.INTERNAL_ERROR
    assert close_code_for(ErrorCode.OVERLOADED) is CloseCode.TRY_AGAIN_LATER
    assert close_code_for(ErrorCode.SLOW_READER) is CloseCode.POLICY_VIOLATION
    assert close_code_for(ErrorCode.SERVER_SHUTDOWN) is CloseCode.SERVICE_RESTART
    assert close_code_for(ErrorCode.ENGINE_FAILED) is CloseCode.INTERNAL_ERROR


def test_protocol_error_carries_fields_and_replaces():
    err = ProtocolError("text_too_long", "too long", param="text", context_id="c")
    assert err.code is ErrorCode.TEXT_TOO_LONG
    assert str(err) == "too long"
    assert (err.param, err.context_id, err.event_id, err.fatal) == ("text", "c", None, False)
    other = err.replace(event_id="e", fatal=True)
    assert (other.code, other.message, other.param, other.context_id) == (
        err.code,
        err.message,
        "text",
        "c",
    )
    assert (other.event_id, other.fatal) == ("e", True)
    assert err.event_id is None  # the original is unchanged
    assert err == ProtocolError(ErrorCode.TEXT_TOO_LONG, "too long", param="text", context_id="c")
    assert err != other
    assert "text_too_long" in repr(err)
