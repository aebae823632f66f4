"""ARScheduler policy, with no model and no clock."""

from __future__ import annotations

import pytest

from voiceserver.engine.scheduler import ARScheduler


def make(slots: int = 4, batch: int = 8, lead: float = 5.0) -> ARScheduler:
    return ARScheduler(max_slots=slots, max_batch=batch, max_lead_s=lead)


def test_admission_by_free_slots_first_come_first_served() -> None:
    s = make(slots=2)
    for cid in (1, 2, 3):
        s.add(cid, now=cid)
    assert s.schedule(10).admit == [1, 2]
    assert s.num_waiting == 1
    assert s.schedule(10).admit == []
    assert s.remove(1) is True  # held a slot
    assert s.schedule(10).admit == [3]
    assert s.used_slots == 2


def test_removing_a_waiting_context_frees_no_slot() -> None:
    s = make(slots=1)
    s.add(1, 0)
    s.add(2, 0)
    s.schedule(0)
    assert s.remove(2) is False
    assert s.num_waiting == 0 and s.used_slots == 1


def test_only_contexts_with_work_are_stepped() -> None:
    s = make()
    for cid in (1, 2):
        s.add(cid, 0)
    s.schedule(0)
    s.set_work(1, True)
    assert s.schedule(0).step == [1]


def test_no_audio_yet_goes_first_then_smallest_slack() -> None:
    s = make()
    for cid in (1, 2, 3):
        s.add(cid, 0)
        s.schedule(0)
        s.set_work(cid, True)
    # 1 has 3 s of audio since t=0, 2 has 1 s since t=0; 3 has none yet.
    s.update(1, 3.0, finished=False, has_work=True, now=0.0)
    s.update(2, 1.0, finished=False, has_work=True, now=0.0)
    assert s.schedule(0.5).step == [3, 2, 1]
    # Among newcomers, the oldest first.
    s.add(4, 0.6)
    s.schedule(0.6)
    s.set_work(4, True)
    assert s.schedule(0.7).step[:2] == [3, 4]


def test_batch_cap_prefers_the_most_urgent() -> None:
    s = make(batch=2)
    for cid in (1, 2, 3):
        s.add(cid, 0)
        s.schedule(0)
        s.set_work(cid, True)
        s.update(cid, float(cid), finished=False, has_work=True, now=0.0)
    assert s.schedule(0.1).step == [1, 2]


def test_far_ahead_context_is_held_back_until_playout_catches_up() -> None:
    s = make(lead=2.0)
    s.add(1, 0)
    s.schedule(0)
    s.set_work(1, True)
    s.update(1, 5.0, finished=False, has_work=True, now=0.0)  # 5 s produced at t=0
    assert s.schedule(1.0).step == []  # slack 4 s > 2 s
    assert s.next_wakeup(1.0) == pytest.approx(3.0)
    assert s.schedule(3.5).step == [1]  # slack 1.5 s


def test_finished_context_is_not_stepped() -> None:
    s = make()
    s.add(1, 0)
    s.schedule(0)
    s.set_work(1, True)
    s.update(1, 0.5, finished=True, has_work=True, now=0)
    assert s.schedule(0).step == []


def test_rejects_nonsense_sizes() -> None:
    with pytest.raises(ValueError):
        ARScheduler(0, 1, 1.0)


def test_scheduler_imports_no_torch() -> None:
    """The scheduler is plain Python: importing it alone pulls in no torch."""
    import subprocess
    import sys

    code = "import sys, voiceserver.engine.scheduler; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
