"""SlotRunner: a ``ModelRunner`` that applies each ``StepPlan`` to one slot table.

Every autoregressive family runs the same plan the same way: free the slots whose
contexts ended, admit new contexts into free slots, give running slots the input
that arrived, then step the listed slots once, batched. :class:`SlotRunner` does the
plan's bookkeeping once - which slots hold a context (``active``), the units each
has been fed and not yet taken (``queued`` and the per-slot queues), whether its
input is closed - in arrays indexed by slot, and calls the family's hooks:

- :meth:`SlotRunner.on_free` (slots ended: give back their KV blocks),
- :meth:`SlotRunner.on_admit` (new contexts, all of one plan together: write their
  settings into the slot tables in one go),
- :meth:`SlotRunner.on_feed` (optional: a family that takes input some other way
  than as queued units, e.g. a text track with word timing),
- :meth:`SlotRunner.run_step` (one step of the listed slots: the family's model
  step, and its ``StepResult`` built over arrays).

Nothing here touches a device: the hooks own the model, the slot tables
(``models.kit.tables``), the sampler and the graphs.
"""

from __future__ import annotations

from abc import abstractmethod
from collections import deque

import numpy as np

from models.base import Feed, ModelRunner, Prepared, StepPlan, StepResult


class SlotRunner(ModelRunner):
    def __init__(self, slots: int) -> None:
        self.active = np.zeros(slots, bool)
        """The slot holds a context."""
        self.prepared: list[Prepared | None] = [None] * slots
        self.closed = np.zeros(slots, bool)
        """No more input will come for the slot's context."""
        self.queued = np.zeros(slots, np.int64)
        """Units fed and not yet taken (``len`` of the slot's queue)."""
        self._units: dict[int, deque[np.ndarray]] = {}
        """Queued units of the slots that have some (a runner may have 100,000 slots)."""

    @property
    def max_slots(self) -> int:
        return len(self.active)

    def execute(self, plan: StepPlan) -> StepResult:
        """Free, admit, feed, step (in that order, as the plan says)."""
        if len(plan.free):
            self.on_free(plan.free)
            for slot in plan.free.tolist():
                self.active[slot] = False
                self.prepared[slot] = None
                self._units.pop(slot, None)
                self.queued[slot] = 0
        if plan.admit:
            slots = np.asarray([a.slot for a in plan.admit], np.int64)
            for admit in plan.admit:
                self.prepared[admit.slot] = admit.prepared
                self._units.pop(admit.slot, None)
            self.active[slots] = True
            self.closed[slots] = False
            self.queued[slots] = 0
            self.on_admit(slots, [a.prepared for a in plan.admit])
        for feed in plan.feed:
            if self.active[feed.slot]:
                self.on_feed(feed)
        return self.run_step(plan.step)

    # -- input the runner keeps for the family --------------------------------------

    def on_feed(self, feed: Feed) -> None:
        """Default: queue the units (``take_unit`` hands them out) and note a close."""
        if feed.units:
            queue = self._units.setdefault(feed.slot, deque())
            queue.extend(feed.units)
            self.queued[feed.slot] = len(queue)
        self.closed[feed.slot] |= feed.close

    def take_unit(self, slot: int) -> np.ndarray:
        """The slot's next queued unit (there must be one: ``queued[slot] > 0``)."""
        self.queued[slot] -= 1
        queue = self._units[slot]
        unit = queue.popleft()
        if not queue:
            del self._units[slot]
        return unit

    # -- hooks --------------------------------------------------------------------

    @abstractmethod
    def on_free(self, slots: np.ndarray) -> None:
        """These slots' contexts are gone: release what the family holds for them."""

    @abstractmethod
    def on_admit(self, slots: np.ndarray, prepared: list[Prepared]) -> None:
        """New contexts in ``slots`` (each free until now), all of one plan."""

    @abstractmethod
    def run_step(self, rows: np.ndarray) -> StepResult:
        """Step the slots ``rows`` once (a slot may hold no context: it is finished)."""
