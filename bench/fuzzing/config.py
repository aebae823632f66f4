"""How big a fuzz run is, and what it may read of the server."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class FuzzConfig:
    examples: int = 6
    """Hypothesis examples; each is one barrage (all sessions at once)."""
    native_sessions: int = 3
    compat_sessions: int = 1
    steps: int = 30
    """Steps per native fuzz session in one barrage."""
    compat_steps: int = 15
    seed: int | None = None
    """None: derandomized (the same plans on every run)."""
    replay_budget: int = 80
    """Fresh-connection replays allowed for minimizing findings."""
    spin_window_s: float = 1.0
    cpu_seconds: Callable[[], float] | None = None
    """Cumulative CPU seconds of the server process, for the busy-loop check."""
    flood: bool = True
    """A flooder client floods during every barrage (oracle 6)."""
    flood_source: str | None = "127.0.0.3"
    """The local address the flooder connects from: a client apart from the bystander
    and the fuzz sessions (a loopback server answers every 127.x address). None: the
    default address, shared with the others (they then spend one message budget)."""
    flood_budget: tuple[float, float] = (500.0, 1000.0)
    """The server's ``max_messages_per_s`` and ``messages_burst``: a flood of over
    twice what they allow must have been limited (rate 0: the limit is off)."""
