"""Clone a voice from reference audio for one client: off the event loop, fairly.

Cloning (decoding the reference, running the speaker encoder and codec) takes up to
a second of CPU. It runs on the prepare workers (``FairPreparer``), where clients
take turns and one client holds at most all but one worker, counted against the
client's reference-audio jobs (``Limits.max_client_media_jobs``); a request that
goes away while its clone waits for a worker drops it. The voice upload endpoint
and the batch endpoint's shared references both clone through here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from models.base import ClonedVoice
from voiceserver.clients import ClientId
from voiceserver.engine.prepare import FairPreparer
from voiceserver.runtime import Runtime

T = TypeVar("T")


async def clone_voice(
    rt: Runtime,
    client: ClientId | None,
    audio: object,
    options: Mapping[str, Any],
    field: str = "ref_audio",
) -> ClonedVoice:
    """``ModelRunner.clone_voice(audio, options)`` for ``client``; ModelInputError
    (``rate_limited`` naming ``field`` when the client has its bound of jobs running)."""
    runner = rt.model.runner
    with rt.media.hold(client, field):
        return await run_fairly(rt.preparer, client, lambda: runner.clone_voice(audio, options))


async def run_fairly(preparer: FairPreparer, client: ClientId | None, fn: Callable[[], T]) -> T:
    """``fn()`` on a prepare worker, in ``client``'s turn; its result or its exception."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[tuple[T | None, BaseException | None]] = loop.create_future()

    def call() -> tuple[T | None, BaseException | None]:
        try:
            return fn(), None
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting request as it is
            return None, exc

    def settle(outcome: tuple[T | None, BaseException | None]) -> None:
        if not answer.done():
            answer.set_result(outcome)

    def done(outcome: tuple[T | None, BaseException | None]) -> None:
        try:
            loop.call_soon_threadsafe(settle, outcome)
        except RuntimeError:
            pass  # the loop is gone (shutdown): nobody waits

    job = preparer.submit(client, call, done)
    try:
        result, error = await answer
    except asyncio.CancelledError:
        job.cancel()  # not started yet: dropped with the audio it holds
        raise
    if error is not None:
        raise error
    return result  # type: ignore[return-value]
