"""What crosses the pipe between the front end and an engine process.

The front end sends the engine's own inbox messages (``voiceserver.engine.messages``)
as they are, :class:`Call` for the model's host-side work (preparing a context,
encoding text, cloning a voice: run where the model lives), and :class:`Discard`.
The engine process answers calls with :class:`Reply`, sends one :class:`Events` per
client per engine step, and a :class:`Report` of its figures every few milliseconds.

Messages travel pickled (protocol 5) over a private ``multiprocessing`` pipe between
a server and the child it started, never over a network: a family's ``Prepared``
and a stored voice's settings are its own dataclasses of host arrays, which a
schema-bound codec would need a schema for per family.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from models.base import Capabilities, ModelInputError, Prepared
from voiceserver.engine.core import EngineConfig
from voiceserver.engine.messages import EngineBatch
from voiceserver.engine.snapshot import EngineSnapshot


@dataclass(frozen=True)
class Call:
    """Run ``method`` of the engine host with ``args``; answered by a :class:`Reply`."""

    id: int
    method: str
    args: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Failure:
    """An exception raised by a call, as data (exceptions with keyword fields do not
    survive pickling): a ModelInputError comes back as one, anything else as
    :class:`EngineCallError`."""

    message: str
    param: str | None = None
    code: str | None = None
    """Set for a ModelInputError (its ``code``); None for anything else."""
    kind: str = ""
    """The exception's class name."""

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        if isinstance(exc, ModelInputError):
            return cls(str(exc), exc.param, exc.code, type(exc).__name__)
        return cls(str(exc), kind=type(exc).__name__)

    def exception(self) -> Exception:
        if self.code is not None:
            return ModelInputError(self.message, param=self.param, code=self.code)
        return EngineCallError(f"{self.kind}: {self.message}")


class EngineCallError(RuntimeError):
    """A call into an engine process failed there with something other than bad input."""


class EngineLost(RuntimeError):
    """The engine process is gone (it died or was stopped)."""


@dataclass(frozen=True)
class Reply:
    id: int
    value: Any = None
    failure: Failure | None = None


@dataclass(frozen=True)
class Events:
    """One engine step's events for client ``client`` (``EngineCore.attach``)."""

    client: int
    batch: EngineBatch
    snapshot: EngineSnapshot | None = None
    """The engine's figures after the step that made the batch (None: not from a
    step): admission reads them with the events, so a context's end and its freed
    slot are known together."""


@dataclass(frozen=True)
class Report:
    """The engine's figures now, and the observations made since the last report."""

    snapshot: EngineSnapshot
    ar_batches: tuple[int, ...] = ()
    vocoder_batches: tuple[int, ...] = ()
    ar_steps: tuple[float, ...] = ()


@dataclass(frozen=True)
class Hello:
    """Sent once the model is loaded and the engine thread runs."""

    capabilities: Capabilities
    config: EngineConfig
    """The engine's settings after start-up sizing."""
    snapshot: EngineSnapshot
    pid: int
    device: str
    """Where the model runs, e.g. ``cuda:0 (GPU 3)`` or ``cpu``."""
    aligns: bool
    """Whether the runner overrides word alignment at all (``aligns_words``)."""


@dataclass(frozen=True)
class StartFailed:
    """The engine process could not start (loading the model failed): why."""

    message: str


@dataclass(frozen=True)
class Discard:
    """A context the engine never registered is gone: drop its prepared inputs."""

    cid: int


@dataclass
class Staged(Prepared):
    """Stands for a context's prepared inputs, kept in the engine process where they
    were made (they may hold device state, e.g. a primed decoder): a ``Ready`` that
    carries it is matched there to what ``prepare`` made for its context."""

    cid: int = -1


@dataclass(frozen=True)
class AppendText:
    """A piece of a context's text, encoded in the engine process in the order the
    pieces were sent (and before a ``Ready`` sent after them), so that what a model
    sees at admission does not depend on how long the pipe took."""

    cid: int
    client: int
    text: str
    flush_id: int | None = None
    offset: int = 0
    """Where ``text`` starts in the context's whole text (word timing indexes it)."""
    aligned: bool = False
    """The context gets word timing: the engine process answers with :class:`WordSpans`."""


@dataclass(frozen=True)
class WordSpans:
    """The words of one piece of text, as the model cut them, sent to the front end
    before any word timing that names them (an event in the context's batch)."""

    cid: int
    text: str
    offset: int
    spans: np.ndarray
