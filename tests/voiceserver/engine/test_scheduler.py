"""ARScheduler policy, with no model and no clock: arrays over slots."""

from __future__ import annotations

import numpy as np
import pytest

from voiceserver.engine.scheduler import ARScheduler


def make(slots: int = 4, batch: int = 8, lead: float = 5.0) -> ARScheduler:
    return ARScheduler(max_slots=slots, max_batch=batch, max_lead_s=lead)


def update(s: ARScheduler, cid: int, audio: float, now: float, **flags: bool) -> None:
    slot = s.slot_of(cid)
    assert slot is not None
    s.update(
        np.array([slot]),
        np.array([audio]),
        np.array([flags.get("finished", False)]),
        np.array([flags.get("waiting", False)]),
        now,
    )


def stepped(s: ARScheduler, now: float) -> list[int]:
    return [int(s.cid[slot]) for slot in s.schedule(now).step]


def test_admission_by_free_slots_first_come_first_served() -> None:
    s = make(slots=2)
    for cid in (1, 2, 3):
        s.enqueue(cid)
    assert [cid for cid, _ in s.schedule(10).admit] == [1, 2]
    assert s.num_waiting == 1
    assert s.schedule(10).admit == []
    assert s.remove(1) is not None  # held a slot
    assert [cid for cid, _ in s.schedule(10).admit] == [3]
    assert s.used_slots == 2 and s.free_slots == 0


def test_removing_a_waiting_context_frees_no_slot() -> None:
    s = make(slots=1)
    s.enqueue(1)
    s.enqueue(2)
    s.schedule(0)
    assert s.remove(2) is None
    assert s.num_waiting == 0 and s.used_slots == 1


def test_admitted_contexts_step_in_the_same_decision() -> None:
    s = make()
    s.enqueue(1)
    decision = s.schedule(0)
    assert [int(s.cid[x]) for x in decision.step] == [1]


def test_waiting_contexts_are_not_stepped_until_fed() -> None:
    s = make()
    s.enqueue(1)
    s.enqueue(2)
    s.schedule(0)
    update(s, 1, 0.0, 0.0, waiting=True)
    assert stepped(s, 0) == [2]
    s.set_ready(s.slot_of(1))  # type: ignore[arg-type]
    assert sorted(stepped(s, 0)) == [1, 2]


def test_no_audio_yet_goes_first_then_smallest_slack() -> None:
    s = make(batch=3)
    for cid in (1, 2, 3, 4):
        s.enqueue(cid)
    s.schedule(0)
    # 1 has 3 s of audio since t=0, 2 has 1 s, 4 has 0.5 s; 3 has none yet.
    update(s, 1, 3.0, 0.0)
    update(s, 2, 1.0, 0.0)
    update(s, 4, 0.5, 0.0)
    assert stepped(s, 0.5) == [3, 4, 2]


def test_batch_cap_prefers_the_most_urgent() -> None:
    s = make(batch=2)
    for cid in (1, 2, 3):
        s.enqueue(cid)
    s.schedule(0)
    for cid in (1, 2, 3):
        update(s, cid, float(cid), 0.0)
    assert stepped(s, 0.1) == [1, 2]


def test_far_ahead_context_is_held_back_until_playout_catches_up() -> None:
    s = make(lead=2.0)
    s.enqueue(1)
    s.schedule(0)
    update(s, 1, 5.0, 0.0)  # 5 s produced at t=0
    assert stepped(s, 1.0) == []  # slack 4 s > 2 s
    assert s.next_wakeup(1.0) == pytest.approx(3.0)
    assert stepped(s, 3.5) == [1]  # slack 1.5 s


def test_paused_blocked_and_finished_contexts_are_not_stepped() -> None:
    s = make()
    for cid in (1, 2, 3, 4):
        s.enqueue(cid)
    s.schedule(0)
    s.set_paused(s.slot_of(1), True)  # type: ignore[arg-type]
    s.blocked[s.slot_of(2)] = True
    update(s, 3, 0.5, 0.0, finished=True)
    assert stepped(s, 0) == [4]


def test_a_context_may_run_ahead_by_its_own_lead() -> None:
    s = make(lead=1.0)
    s.enqueue(1, max_lead_s=100.0)  # a file request
    s.enqueue(2)
    s.schedule(0)
    update(s, 1, 50.0, 0.0)
    update(s, 2, 50.0, 0.0)
    assert stepped(s, 1.0) == [1]


def test_rejects_nonsense_sizes() -> None:
    with pytest.raises(ValueError):
        ARScheduler(0, 1, 1.0)


def test_scheduler_imports_no_torch() -> None:
    """The scheduler is plain Python and numpy: importing it alone pulls in no torch."""
    import subprocess
    import sys

    code = "import sys, voiceserver.engine.scheduler; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
