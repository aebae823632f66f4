"""Engine: what the engine client needs of an engine, wherever it runs.

:class:`~voiceserver.engine.core.EngineCore` (a thread in this process) and
:class:`~voiceserver.engine.remote.RemoteEngine` (a process of its own) both are one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from models.base import ModelRunner, Prepared, SynthParams
from voiceserver.engine.core import EngineConfig
from voiceserver.engine.messages import EngineBatch, InboxMessage
from voiceserver.engine.snapshot import EngineSnapshot


class Engine(Protocol):
    runner: ModelRunner
    """The model's host-side calls (validation, text encoding), where they run."""
    config: EngineConfig
    lost: bool
    """The engine died (only an engine process can): nothing it held will finish."""
    encodes_text: bool
    """Text goes to the engine as ``AppendText`` and is encoded there, in order (an
    engine process); False: the engine client encodes it into ``AppendUnits``."""

    @property
    def max_slots(self) -> int: ...

    @property
    def full(self) -> bool:
        """No new context would be taken now."""
        ...

    def attach(self, deliver: Callable[[EngineBatch], None]) -> int: ...

    def new_id(self) -> int: ...

    def reserve(self, cid: int | None = None, check_load: bool = True) -> int | None: ...

    def retract(self, cid: int) -> bool: ...

    def submit(self, message: InboxMessage) -> None: ...

    def prepare(self, cid: int, params: SynthParams) -> Prepared: ...

    def forget(self, cid: int) -> None: ...

    def snapshot(self) -> EngineSnapshot: ...

    def queue_depths(self) -> dict[str, int]: ...

    def on_lost(self, callback: Callable[[], None]) -> None: ...

    def stop(self, timeout: float = 5.0) -> None: ...
