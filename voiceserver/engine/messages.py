"""Plain dataclasses crossing the thread boundary between sessions and the engine.

Inbox messages go from the event loop to the engine thread; events come back
through a ``sink`` callable that the session supplies (it hops to the event
loop with ``call_soon_threadsafe``). Cancels are inbox messages, never shared
flags.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from models.base import SynthParams

# -- inbox (event loop -> engine) -------------------------------------------


@dataclass(frozen=True)
class OpenContext:
    cid: int
    params: SynthParams
    sink: Callable[[EngineEvent], None]
    max_lead_s: float | None = None
    """How far ahead of real-time playout this context may run; None: the
    engine's default (live streams). File requests pass a larger value."""


@dataclass(frozen=True)
class AppendText:
    """One text segment; ``flush_id`` (if set) is acknowledged once all audio
    of the text sent so far has been posted."""

    cid: int
    text: str
    flush_id: int | None = None


@dataclass(frozen=True)
class CloseInput:
    cid: int


@dataclass(frozen=True)
class Cancel:
    cid: int


@dataclass(frozen=True)
class Throttle:
    """Backpressure from a consumer: a paused context is neither stepped nor
    decoded until it is resumed (its client has taken enough of its audio)."""

    cid: int
    paused: bool


@dataclass(frozen=True)
class Shutdown:
    pass


InboxMessage = OpenContext | AppendText | CloseInput | Cancel | Throttle | Shutdown

# -- events (engine -> event loop) ------------------------------------------


@dataclass(frozen=True)
class AudioChunk:
    """Float32 samples at the model's native rate. ``flush_ids`` are flushes
    completed by this chunk; ``final`` marks the context's last chunk."""

    cid: int
    pcm: np.ndarray
    flush_ids: tuple[int, ...] = ()
    final: bool = False
    hit_limit: bool = False


@dataclass(frozen=True)
class ContextFailed:
    cid: int
    code: str
    message: str
    param: str | None = None


@dataclass(frozen=True)
class ContextReleased:
    """The engine dropped every trace of a cancelled context."""

    cid: int


EngineEvent = AudioChunk | ContextFailed | ContextReleased


@dataclass
class EngineStats:
    """Counters the engine thread updates and anyone may read (ints are atomic)."""

    active_contexts: int = 0
    """Contexts the engine holds (admitted or waiting)."""
    active_slots: int = 0
    """Model slots in use."""
    steps: int = 0
    vocoder_calls: int = 0
    errors: dict[str, int] = field(default_factory=dict)
