"""What :class:`~protocol.session.ServerSession` reports for each piece of client input.

One event per accepted client message (two for a ``text.append`` that opens a new
context: :class:`ContextOpened` then :class:`TextAppended`; ``session.close`` gives an
:class:`EndRequested` for every open context, then :class:`CloseRequested`), or one
:class:`ErrorEvent` for input that was rejected. The caller acts on them (feeds the
engine, answers the client); the state machine has already updated its bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import ProtocolError
from protocol.messages import ContextSettings, SessionSettings


@dataclass(frozen=True, slots=True)
class ContextOpened:
    """A context exists now. The caller answers with ``session.context_created(context_id)``.

    ``implicit``: it was opened by a text.append to a new id, with session defaults.
    """

    context_id: str
    stream: int
    settings: ContextSettings
    implicit: bool = False
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class TextAppended:
    context_id: str
    text: str
    flush: bool = False


@dataclass(frozen=True, slots=True)
class FlushRequested:
    context_id: str
    flush_id: str | None = None


@dataclass(frozen=True, slots=True)
class EndRequested:
    """No more text for the context: finish its audio, then ``context_done``."""

    context_id: str


@dataclass(frozen=True, slots=True)
class CancelRequested:
    """Barge-in: drop the context's work, then ``context_cancelled``.

    The context stopped counting against ``max_contexts`` already.
    """

    context_id: str
    played_ms: int | None = None


@dataclass(frozen=True, slots=True)
class SettingsUpdated:
    """session.update was applied; the caller answers with ``session.updated_message(event_id)``."""

    settings: SessionSettings
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class KeepaliveReceived:
    """Reset the idle timer."""


@dataclass(frozen=True, slots=True)
class CloseRequested:
    """session.close: finish the open contexts (each got an EndRequested), then close 1000."""


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """Rejected input. Send ``session.error_message(error)``; if ``error.fatal``, then close
    with ``close_code_for(error.code)``."""

    error: ProtocolError


Event = (
    ContextOpened
    | TextAppended
    | FlushRequested
    | EndRequested
    | CancelRequested
    | SettingsUpdated
    | KeepaliveReceived
    | CloseRequested
    | ErrorEvent
)
