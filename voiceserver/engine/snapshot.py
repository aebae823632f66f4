"""EngineSnapshot: one engine's figures at one moment.

Read from any thread (an engine thread in this process, or the last report of an
engine process): placement picks the engine with the most headroom from it,
``/health`` and ``/metrics`` show it per engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EngineSnapshot:
    max_slots: int
    """Model slots the engine uses (contexts generating at once)."""
    used_slots: int = 0
    """Slots held by admitted contexts."""
    reserved: int = 0
    """Contexts promised a slot and not admitted yet."""
    load: float = 0.0
    """Smoothed step time per second of audio a stepped context gets (above
    ``EngineConfig.admission_load``: new contexts are refused)."""
    active_contexts: int = 0
    """Contexts the engine holds (generating, waiting or draining their audio)."""
    steps: int = 0
    vocoder_calls: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    inbox: int = 0
    """Messages waiting in the engine's inbox."""
    waiting: int = 0
    """Prepared contexts waiting for a slot."""
    kv_blocks_used: int = 0
    """Paged KV blocks held by contexts (0 and 0: the model has no paged KV cache)."""
    kv_blocks_total: int = 0
    step_s: float = 0.0
    """Smoothed wall time of one AR step, seconds."""
    at: float = 0.0
    """When it was taken (``time.monotonic``, one clock for every process of the host):
    of two reports, the later one counts."""
    registered: int = 0
    """Contexts registered through an engine process's pipe so far (the front end's
    reservations the engine has seen; 0 for an engine in this process)."""

    @property
    def free_slots(self) -> int:
        return max(0, self.max_slots - self.used_slots - self.reserved)
