"""EngineFleet: the engines behind one front end, and where a new session goes.

One engine per GPU (or several on a CPU), each behind its own engine client. A
session is placed once, on the live engine with the most headroom, and stays
there for its life; an HTTP request or a compatibility socket's utterance is
placed the same way, each on its own. Headroom is the share of an engine's slots
not promised to contexts or sessions already placed there, so a burst of new
sockets spreads before any of them has sent text; an engine that is full (every
slot promised, or too loaded to keep its streams real time) takes nothing until it
has room, and a dead one never again.
"""

from __future__ import annotations

from voiceserver.engine.client import EngineClient, Overloaded


class EngineFleet:
    def __init__(self, clients: list[EngineClient]) -> None:
        if not clients:
            raise ValueError("a fleet needs at least one engine")
        self.clients = clients

    @property
    def live(self) -> list[EngineClient]:
        return [c for c in self.clients if not c.lost]

    def place(self, strict: bool = True) -> EngineClient:
        """The engine a new session (or request) goes to; Overloaded when none is left,
        or (``strict``) when every live engine is full. Not ``strict``: a session
        accepted while every engine is full goes to the least committed one, whose
        admission then answers each of its contexts."""
        live = self.live
        if not live:
            raise Overloaded("no engine is serving (every engine process stopped)")
        open_ = [c for c in live if not c.engine.full]
        if not open_ and strict:
            raise Overloaded("every engine is at capacity; retry in a moment")
        return min(open_ or live, key=_committed)

    @property
    def full(self) -> bool:
        """No live engine would take a new context now."""
        return all(c.engine.full for c in self.live)

    @property
    def share(self) -> int:
        """Contexts one client may hold across the live engines."""
        return sum(c.held.cap for c in self.live)


def _committed(client: EngineClient) -> float:
    """The share of an engine's slots its placed sessions and open contexts claim."""
    return (client.open_contexts + client.sessions) / max(1, client.engine.max_slots)
