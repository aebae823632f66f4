"""Plain data crossing the boundary between the engine client and the engine.

Inbox messages go from the client (on an event loop) to the engine thread;
events come back in one :class:`EngineBatch` per client per engine step. No
closures, no model objects beyond a family's ``Prepared`` inputs (host arrays),
so the engine could run in a process of its own. Cancels are inbox messages,
never shared flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from models.base import Prepared

# -- inbox (client -> engine) -------------------------------------------------


@dataclass(frozen=True)
class Register:
    """A context exists: its text may arrive before its inputs are prepared."""

    cid: int
    client: int
    """Which client gets the context's events (``EngineCore.attach``)."""
    max_lead_s: float | None = None
    """How far ahead of real-time playout the context may run; None: the engine's
    default (live streams). File requests pass a larger value."""
    first_chunk_frames: int | None = None
    """Frames in the context's first vocoder chunk; None: ``EngineConfig.first_chunk_frames``."""


@dataclass(frozen=True)
class Ready:
    """The context's inputs are prepared: it may take a model slot."""

    cid: int
    prepared: Prepared


@dataclass(frozen=True)
class AppendUnits:
    """Input units (encoded text). ``flush_id`` (if set) is acknowledged once all
    audio of the input sent so far has been posted."""

    cid: int
    units: tuple[np.ndarray, ...]
    flush_id: int | None = None
    words: tuple[np.ndarray, ...] = ()
    """Per unit, where its words are (``models.base.Feed.words``); empty unless the
    context asked for word timing."""


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


InboxMessage = Register | Ready | AppendUnits | CloseInput | Cancel | Throttle | Shutdown

# -- events (engine -> client) ------------------------------------------------


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
class WordTimings:
    """Word timing in audio time: word ``index[i]`` of the context (counted from 0
    in the order its text arrived) is heard from ``start_s[i]`` to ``end_s[i]``
    seconds after the context's first sample. Posted no later than the audio
    it describes (before the chunk holding the word's first sample)."""

    cid: int
    index: np.ndarray
    """int64"""
    start_s: np.ndarray
    """float64"""
    end_s: np.ndarray
    """float64"""


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


EngineEvent = AudioChunk | WordTimings | ContextFailed | ContextReleased


@dataclass(frozen=True)
class EngineBatch:
    """One engine step's events for one client, in order."""

    events: list[EngineEvent]


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
