"""The session outbox: every byte counted, cancel ordered after its own created."""

from __future__ import annotations

import asyncio

from voiceserver.session.outbox import Outbox


async def drain(box: Outbox) -> list[object]:
    return [await box.get() for _ in range(len(box))]


async def test_every_item_counts_toward_the_budget() -> None:
    box = Outbox(max_bytes=100)
    box.put("x" * 60, 60)
    assert not box.over_limit
    box.put(b"y" * 50, 50)
    assert box.over_limit and box.queued_bytes == 110
    await box.get()
    assert box.queued_bytes == 50 and not box.over_limit


async def test_cancel_goes_to_the_front_but_never_before_its_created() -> None:
    a, b = object(), object()
    box = Outbox(max_bytes=1 << 20)
    box.put("audio-a-1", 10, a)
    box.put("created-b", 10, b, opens=True)
    box.put("audio-b-1", 10, b)
    box.put("audio-a-2", 10, a)
    box.purge(b)
    box.put_front("cancelled-b", 0, b)
    assert await drain(box) == ["audio-a-1", "created-b", "cancelled-b", "audio-a-2"]


async def test_cancel_of_an_announced_context_jumps_the_queue() -> None:
    a, b = object(), object()
    box = Outbox(max_bytes=1 << 20)
    box.put("audio-a-1", 10, a)
    box.put("audio-b-1", 10, b)
    box.purge(b)
    box.put_front("cancelled-b", 0, b)
    assert await drain(box) == ["cancelled-b", "audio-a-1"]
    assert box.queued_bytes == 0


async def test_closed_outbox_keeps_nothing() -> None:
    box = Outbox(max_bytes=10)
    box.put("a", 1)
    box.close()
    box.put("b", 1)
    box.put_front("c", 1)
    assert box.queued_bytes == 0
    assert await asyncio.wait_for(box.get(), 1) is None
