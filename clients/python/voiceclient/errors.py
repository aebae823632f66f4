"""Exceptions the client raises: what the server reported, or a lost connection."""

from __future__ import annotations

from protocol.errors import ProtocolError
from protocol.messages import ErrorMessage


class VoiceServerError(Exception):
    """An ``error`` from the server (or a protocol violation the client detected).

    ``code`` is one of the stable codes of :class:`protocol.ErrorCode` (or
    ``connection_closed`` / ``connect_failed`` for :class:`VoiceConnectionError`).
    """

    def __init__(
        self,
        code: str,
        message: str,
        param: str | None = None,
        *,
        context_id: str | None = None,
        fatal: bool = False,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.param = param
        self.context_id = context_id
        self.fatal = fatal

    @classmethod
    def from_message(cls, msg: ErrorMessage) -> VoiceServerError:
        return cls(msg.code, msg.message, msg.param, context_id=msg.context_id, fatal=msg.fatal)

    @classmethod
    def from_protocol(cls, err: ProtocolError) -> VoiceServerError:
        return cls(str(err.code), err.message, err.param, context_id=err.context_id)

    def __repr__(self) -> str:
        param = f", param={self.param!r}" if self.param is not None else ""
        return f"{type(self).__name__}({self.code!r}, {self.message!r}{param})"


class VoiceConnectionError(VoiceServerError):
    """The connection could not be opened, or closed while a request was pending.

    ``close_code`` is the WebSocket close code when the server closed the socket.
    """

    def __init__(self, code: str, message: str, *, close_code: int | None = None) -> None:
        super().__init__(code, message, fatal=True)
        self.close_code = close_code
