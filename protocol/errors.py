"""Stable error codes, WebSocket close codes and the exception that carries them.

The string values of :class:`ErrorCode` are part of wire protocol v1: clients
switch on them, so a value never changes meaning and is never reused.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import Any


class ErrorCode(StrEnum):
    """The ``code`` of an ``error`` (or ``warning``) message."""

    INVALID_JSON = "invalid_json"  # malformed JSON, or JSON that is not an object
    UNKNOWN_TYPE = "unknown_type"  # `type` missing or not a known message type
    INVALID_FIELD = "invalid_field"  # wrong type or out-of-range value; `param` names it
    MISSING_FIELD = "missing_field"  # a required field is absent; `param` names it
    UNSUPPORTED_VALUE = "unsupported_value"  # not one of the allowed values (listed in message)
    INVALID_FRAME = "invalid_frame"  # binary audio frame too short or of another version
    UNKNOWN_CONTEXT = "unknown_context"
    CONTEXT_EXISTS = "context_exists"
    CONTEXT_CLOSED = "context_closed"  # text/flush/end after context.end or after it finished
    TEXT_TOO_LONG = "text_too_long"
    TOO_MANY_CONTEXTS = "too_many_contexts"
    BINARY_NOT_ALLOWED = "binary_not_allowed"
    MESSAGE_TOO_BIG = "message_too_big"
    UNKNOWN_VOICE = "unknown_voice"
    UNKNOWN_MODEL = "unknown_model"
    UNSUPPORTED_LANGUAGE = "unsupported_language"
    SESSION_CLOSING = "session_closing"  # any message after session.close
    RATE_LIMITED = "rate_limited"
    OVERLOADED = "overloaded"
    INTERNAL_ERROR = "internal_error"
    MAX_FRAMES_REACHED = "max_frames_reached"  # sent as a warning: audio was cut at the cap
    UNAUTHORIZED = "unauthorized"
    IDLE_TIMEOUT = "idle_timeout"
    SLOW_READER = "slow_reader"  # the client did not read what it was sent fast enough
    SERVER_SHUTDOWN = "server_shutdown"  # the server stopped before the context finished
    ORIGIN_NOT_ALLOWED = "origin_not_allowed"  # a browser page from a foreign origin
    REQUEST_TIMEOUT = "request_timeout"  # an HTTP request body did not arrive in time
    TOKEN_EXPIRED = "token_expired"  # the socket's connect token expired: it finishes, then closes
    HOST_NOT_ALLOWED = "host_not_allowed"  # HTTP 421: a Host the server does not answer to
    MISSING_HOST = "missing_host"  # HTTP 400: an HTTP/1.1 request without exactly one Host
    HEADERS_TOO_LARGE = "headers_too_large"  # HTTP 431: request headers over the limit
    ENGINE_FAILED = "engine_failed"  # the engine serving it stopped: reconnect (close 1011)


class CloseCode(IntEnum):
    """WebSocket close codes the server uses."""

    NORMAL = 1000
    POLICY_VIOLATION = 1008  # auth, limits, slow reader
    MESSAGE_TOO_BIG = 1009
    INTERNAL_ERROR = 1011
    SERVICE_RESTART = 1012  # graceful drain
    TRY_AGAIN_LATER = 1013  # server full
    UNAUTHORIZED = 4001
    IDLE_TIMEOUT = 4008


_CLOSE_CODE_FOR_ERROR: dict[ErrorCode, CloseCode] = {
    ErrorCode.MESSAGE_TOO_BIG: CloseCode.MESSAGE_TOO_BIG,
    ErrorCode.INTERNAL_ERROR: CloseCode.INTERNAL_ERROR,
    ErrorCode.ENGINE_FAILED: CloseCode.INTERNAL_ERROR,
    ErrorCode.OVERLOADED: CloseCode.TRY_AGAIN_LATER,
    ErrorCode.UNAUTHORIZED: CloseCode.UNAUTHORIZED,
    ErrorCode.IDLE_TIMEOUT: CloseCode.IDLE_TIMEOUT,
    ErrorCode.SESSION_CLOSING: CloseCode.NORMAL,
    ErrorCode.SERVER_SHUTDOWN: CloseCode.SERVICE_RESTART,
}


def close_code_for(code: ErrorCode) -> CloseCode:
    """The close code that goes with a fatal error of ``code`` (1008 when none is specific)."""
    return _CLOSE_CODE_FOR_ERROR.get(code, CloseCode.POLICY_VIOLATION)


class ProtocolError(Exception):
    """Rejected input or an illegal request, with everything an ``error`` message carries.

    ``fatal`` errors end the session (the caller sends the error, then closes with
    :func:`close_code_for`); all others leave the session and its other contexts running.
    """

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        param: str | None = None,
        context_id: str | None = None,
        event_id: str | None = None,
        fatal: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.param = param
        self.context_id = context_id
        self.event_id = event_id
        self.fatal = fatal

    def replace(self, **changes: Any) -> ProtocolError:
        """A copy with some attributes changed (e.g. ``event_id`` filled in later)."""
        fields = {
            "param": self.param,
            "context_id": self.context_id,
            "event_id": self.event_id,
            "fatal": self.fatal,
        }
        fields.update(changes)
        code = fields.pop("code", self.code)
        message = fields.pop("message", self.message)
        return ProtocolError(code, message, **fields)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProtocolError):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[object, ...]:
        return (self.code, self.message, self.param, self.context_id, self.event_id, self.fatal)

    def __repr__(self) -> str:
        extras = "".join(
            f", {name}={value!r}"
            for name, value in (
                ("param", self.param),
                ("context_id", self.context_id),
                ("event_id", self.event_id),
            )
            if value is not None
        )
        return f"ProtocolError({self.code.value!r}, {self.message!r}{extras}, fatal={self.fatal})"
