"""ARScheduler: which contexts get a model slot, and which step next.

Plain Python, no torch, no clock reads (``now`` is passed in), so it is tested
with fakes. Policy, in order:

1. Admission: waiting contexts take free slots first come, first served.
2. Time to first audio first: a context that has produced no audio yet runs
   before any context that has.
3. Then smallest slack: slack = audio produced - audio the listener has
   played since the context's first audio. The context closest to running dry
   goes first.
4. A context more than ``max_lead_s`` ahead of its playout is not stepped, so
   it never takes device time from one that is behind, and never buffers
   without bound.
5. A paused context (its consumer has not taken its audio yet) is not stepped.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class SchedContext:
    cid: int
    arrival: float
    seq: int
    admitted: bool = False
    has_work: bool = False
    finished: bool = False
    audio_s: float = 0.0
    """Seconds of audio produced so far."""
    first_audio_at: float | None = None
    max_lead_s: float = 30.0
    paused: bool = False

    def slack(self, now: float) -> float:
        if self.first_audio_at is None:
            return float("-inf")
        return self.audio_s - (now - self.first_audio_at)


@dataclass
class ScheduleDecision:
    admit: list[int] = field(default_factory=list)
    step: list[int] = field(default_factory=list)


class ARScheduler:
    def __init__(self, max_slots: int, max_batch: int, max_lead_s: float) -> None:
        if max_slots < 1 or max_batch < 1:
            raise ValueError("max_slots and max_batch must be >= 1")
        self.max_slots = max_slots
        self.max_batch = max_batch
        self.max_lead_s = max_lead_s
        self.contexts: dict[int, SchedContext] = {}
        self.waiting: deque[int] = deque()
        self.used_slots = 0
        self._seq = 0

    def add(self, cid: int, now: float, max_lead_s: float | None = None) -> None:
        """``max_lead_s`` overrides the default lead for this context (e.g. a
        file request that nobody plays in real time)."""
        self._seq += 1
        lead = self.max_lead_s if max_lead_s is None else max_lead_s
        self.contexts[cid] = SchedContext(cid, now, self._seq, max_lead_s=lead)
        self.waiting.append(cid)

    def remove(self, cid: int) -> bool:
        """Forget a context; returns True when it held a slot (now free)."""
        ctx = self.contexts.pop(cid, None)
        if ctx is None:
            return False
        if ctx.admitted:
            self.used_slots -= 1
            return True
        self.waiting.remove(cid)
        return False

    def set_work(self, cid: int, has_work: bool) -> None:
        ctx = self.contexts.get(cid)
        if ctx is not None:
            ctx.has_work = has_work

    def set_paused(self, cid: int, paused: bool) -> None:
        ctx = self.contexts.get(cid)
        if ctx is not None:
            ctx.paused = paused

    def schedule(self, now: float) -> ScheduleDecision:
        decision = ScheduleDecision()
        while self.waiting and self.used_slots < self.max_slots:
            cid = self.waiting.popleft()
            self.contexts[cid].admitted = True
            self.used_slots += 1
            decision.admit.append(cid)

        ready = [
            c
            for c in self.contexts.values()
            if c.admitted
            and c.has_work
            and not c.finished
            and not c.paused
            and c.slack(now) <= c.max_lead_s
        ]
        # No audio yet sorts first (slack -inf), oldest first among those.
        ready.sort(key=lambda c: (c.slack(now), c.seq))
        decision.step = [c.cid for c in ready[: self.max_batch]]
        return decision

    def update(self, cid: int, audio_s: float, finished: bool, has_work: bool, now: float) -> None:
        ctx = self.contexts.get(cid)
        if ctx is None:
            return
        if audio_s > 0 and ctx.first_audio_at is None:
            ctx.first_audio_at = now
        ctx.audio_s += audio_s
        ctx.finished = ctx.finished or finished
        ctx.has_work = has_work and not ctx.finished

    def next_wakeup(self, now: float) -> float | None:
        """Earliest time a context held back by ``max_lead_s`` becomes ready."""
        times = [
            c.first_audio_at + c.audio_s - c.max_lead_s
            for c in self.contexts.values()
            if c.admitted and c.has_work and not c.finished and c.first_audio_at is not None
        ]
        return min(times) if times else None

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)
