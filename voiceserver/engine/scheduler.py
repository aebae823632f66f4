"""ARScheduler: which contexts get a model slot, and which slots step next.

Plain Python and numpy, no torch, no clock reads (``now`` is passed in), so it
is tested with fakes. State is kept in arrays indexed by model slot, so one
decision costs a few vector operations whatever the number of contexts.
Policy, in order:

1. Admission: contexts whose inputs are prepared take free slots, first come,
   first served.
2. Time to first audio first: a context that has produced no audio yet runs
   before any context that has.
3. Then smallest slack: slack = audio produced - audio the listener has played
   since the context's first audio. The context closest to running dry goes first.
4. A context more than its lead (``max_lead_s``) ahead of its playout is not
   stepped, so it never takes device time from one that is behind and never
   buffers without bound; neither is a paused one (its consumer has not taken
   its audio), a blocked one (its frames wait for the vocoder), one waiting for
   input, or a finished one.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ScheduleDecision:
    admit: list[tuple[int, int]]
    """(context id, slot) pairs to admit this step."""
    step: np.ndarray
    """int64 slots to step."""


class ARScheduler:
    def __init__(self, max_slots: int, max_batch: int, max_lead_s: float) -> None:
        if max_slots < 1 or max_batch < 1:
            raise ValueError("max_slots and max_batch must be >= 1")
        self.max_slots = max_slots
        self.max_batch = max_batch
        self.max_lead_s = max_lead_s
        n = max_slots
        self.cid = np.full(n, -1, np.int64)
        self.ready = np.zeros(n, bool)
        """The model can make progress (not waiting for input)."""
        self.finished = np.zeros(n, bool)
        self.paused = np.zeros(n, bool)
        self.blocked = np.zeros(n, bool)
        self.first_audio = np.full(n, np.nan)
        self.audio_s = np.zeros(n)
        self.lead = np.full(n, max_lead_s)
        self.order = np.zeros(n, np.int64)
        self._free = list(range(n))
        """Free slots, a min-heap: the lowest is taken first, so the slots in use stay
        packed at the bottom and a runner's batched reads over a slot range stay short."""
        self._waiting: deque[tuple[int, float]] = deque()
        self._waiting_ids: set[int] = set()
        self._slot: dict[int, int] = {}
        self._seq = 0

    # -- contexts ------------------------------------------------------------

    def enqueue(self, cid: int, max_lead_s: float | None = None) -> None:
        """A context whose inputs are prepared asks for a slot."""
        self._waiting.append((cid, self.max_lead_s if max_lead_s is None else max_lead_s))
        self._waiting_ids.add(cid)

    def remove(self, cid: int) -> int | None:
        """Forget a context; returns the slot it held (now free), if any."""
        if cid in self._waiting_ids:
            self._waiting_ids.discard(cid)
            self._waiting = deque(w for w in self._waiting if w[0] != cid)
            return None
        slot = self._slot.pop(cid, None)
        if slot is None:
            return None
        self.cid[slot] = -1
        self.ready[slot] = self.finished[slot] = self.paused[slot] = self.blocked[slot] = False
        heapq.heappush(self._free, slot)
        return slot

    def slot_of(self, cid: int) -> int | None:
        return self._slot.get(cid)

    # -- decisions -----------------------------------------------------------

    def schedule(self, now: float) -> ScheduleDecision:
        admit = []
        while self._waiting and self._free:
            cid, lead = self._waiting.popleft()
            self._waiting_ids.discard(cid)
            slot = heapq.heappop(self._free)
            self._seq += 1
            self.cid[slot] = cid
            self.ready[slot] = True
            self.finished[slot] = self.paused[slot] = self.blocked[slot] = False
            self.first_audio[slot] = np.nan
            self.audio_s[slot] = 0.0
            self.lead[slot] = lead
            self.order[slot] = self._seq
            self._slot[cid] = slot
            admit.append((cid, slot))
        live = np.flatnonzero(
            self.ready & ~self.finished & ~self.paused & ~self.blocked & (self.cid >= 0)
        )
        if not len(live):
            return ScheduleDecision(admit, live)
        first = self.first_audio[live]
        # No audio yet: slack -inf, so it sorts first.
        slack = np.where(np.isnan(first), -np.inf, self.audio_s[live] - (now - first))
        keep = slack <= self.lead[live]
        live, slack = live[keep], slack[keep]
        if len(live) > self.max_batch:
            chosen = np.lexsort((self.order[live], slack))[: self.max_batch]
            live = live[chosen]
        return ScheduleDecision(admit, live)

    def update(
        self,
        slots: np.ndarray,
        audio_s: np.ndarray,
        finished: np.ndarray,
        waiting: np.ndarray,
        now: float,
    ) -> None:
        """Record a step's results for ``slots`` (arrays in the same order)."""
        started = (audio_s > 0) & np.isnan(self.first_audio[slots])
        self.first_audio[slots[started]] = now
        self.audio_s[slots] += audio_s
        self.finished[slots] |= finished
        self.ready[slots] = ~waiting

    def set_ready(self, slot: int) -> None:
        """New input arrived (or the input closed): the slot can progress again."""
        self.ready[slot] = True

    def set_paused(self, slot: int, paused: bool) -> None:
        self.paused[slot] = paused

    def next_wakeup(self, now: float) -> float | None:
        """Earliest time a context held back by its lead becomes ready."""
        held = self.ready & ~self.finished & ~self.paused & (self.cid >= 0)
        held &= ~np.isnan(self.first_audio)
        if not held.any():
            return None
        return float(np.min(self.first_audio[held] + self.audio_s[held] - self.lead[held]))

    # -- queries -------------------------------------------------------------

    @property
    def used_slots(self) -> int:
        return self.max_slots - len(self._free)

    @property
    def free_slots(self) -> int:
        return len(self._free)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)
