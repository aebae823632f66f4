"""The client side of a v1 session, sans-I/O (for the Python client and the load generator).

It decodes server messages, remembers the stream number each ``context.created``
announced, and turns binary frames back into audio of a named context. It checks
that every context's frames arrive with ``seq`` 0, 1, 2, ... (binary and base64 alike).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from protocol.binary import AudioFrame, unpack_audio
from protocol.codec import decode_server
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import (
    AudioMessage,
    ContextCancelled,
    ContextCreated,
    ContextDone,
    Limits,
    ServerMessage,
    SessionCreated,
    SessionSettings,
    SessionUpdated,
)


@dataclass(slots=True)
class _Stream:
    context_id: str
    next_seq: int = 0


class ClientSession:
    """Tracks what the server announced; ``session_id``/``settings``/``limits`` after
    ``session.created``."""

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.settings: SessionSettings | None = None
        self.limits: Limits | None = None
        self._by_stream: dict[int, _Stream] = {}
        self._by_context: dict[str, int] = {}

    def stream_of(self, context_id: str) -> int | None:
        """The stream number of a context the server announced and has not finished."""
        return self._by_context.get(context_id)

    def receive_text(self, data: str) -> list[ServerMessage]:
        """Decode one JSON text frame; raises ProtocolError for a malformed message or a
        base64 audio chunk out of order."""
        msg = decode_server(data)
        match msg:
            case SessionCreated():
                self.session_id = msg.session_id
                self.settings = msg.session
                self.limits = msg.limits
            case SessionUpdated():
                self.settings = msg.session
            case ContextCreated():
                self._forget(msg.context_id)
                self._by_stream[msg.stream] = _Stream(msg.context_id)
                self._by_context[msg.context_id] = msg.stream
            case AudioMessage():
                stream = self._by_context.get(msg.context_id)
                if stream is not None:
                    self._check_seq(self._by_stream[stream], msg.seq)
            case ContextDone() | ContextCancelled():
                self._forget(msg.context_id)
        return [msg]

    def receive_bytes(self, data: bytes) -> AudioFrame:
        """Decode one binary frame into audio of its context (``context_id`` filled in).

        Raises ProtocolError: invalid_frame (short, other version, seq out of order),
        unknown_context (a stream no context.created announced).
        """
        frame = unpack_audio(data)
        entry = self._by_stream.get(frame.stream)
        if entry is None:
            raise ProtocolError(
                ErrorCode.UNKNOWN_CONTEXT,
                f"audio frame for stream {frame.stream}, which no live context uses",
            )
        self._check_seq(entry, frame.seq)
        return replace(frame, context_id=entry.context_id)

    def _check_seq(self, entry: _Stream, seq: int) -> None:
        expected = entry.next_seq
        entry.next_seq = seq + 1
        if seq != expected:
            raise ProtocolError(
                ErrorCode.INVALID_FRAME,
                f"context {entry.context_id!r}: audio seq {seq}, expected {expected}",
                context_id=entry.context_id,
            )

    def _forget(self, context_id: str) -> None:
        stream = self._by_context.pop(context_id, None)
        if stream is not None:
            self._by_stream.pop(stream, None)
