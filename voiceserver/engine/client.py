"""EngineClient: the only door from the front end (an event loop) to the engine.

Every endpoint opens contexts here and gets a :class:`ContextHandle` back.
What crosses to the engine is plain data (ids, arrays, settings): the client
runs a model's host-side work first, off the event loop when it is slow:

- ``ModelRunner.prepare`` (voice resolution, reference audio, clone encoding)
  in a worker pool; the engine admits a context only once it is prepared;
- ``ModelRunner.encode_text`` (tokenizing, phonemizing) on one worker thread, so
  a context's pieces reach the engine in the order they were sent; a runner
  whose encoding takes microseconds (``encodes_inline``) is called in place,
  since a thread hop would cost more than the work.

Admission control lives here too: ``open`` raises :class:`Overloaded` at once when
the engine has no slot to promise or is too loaded to keep its streams in real
time, so new streams are told to retry instead of every stream stuttering.

Events come back as one batch per engine step for this client, handed to the
event loop with one ``call_soon_threadsafe``, then to each context's callback.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor

from models.base import ModelInputError, Prepared, SynthParams
from voiceserver.engine.core import EngineCore
from voiceserver.engine.messages import (
    AppendUnits,
    Cancel,
    CloseInput,
    ContextFailed,
    ContextReleased,
    EngineBatch,
    EngineEvent,
    Ready,
    Register,
    Throttle,
)

log = logging.getLogger(__name__)

OnEvent = Callable[[EngineEvent], None]


class Overloaded(Exception):
    """The engine cannot take a new context now; retry later (or elsewhere)."""

    retry_after_s = 1


class EngineClient:
    def __init__(
        self,
        engine: EngineCore,
        loop: asyncio.AbstractEventLoop,
        prepare_pool: Executor,
        text_pool: Executor | None = None,
    ) -> None:
        self.engine = engine
        self.runner = engine.runner
        self._loop = loop
        self._prepare_pool = prepare_pool
        self._text_pool = text_pool or ThreadPoolExecutor(1, thread_name_prefix="text")
        self._handles: dict[int, ContextHandle] = {}
        self._inbound: deque[EngineBatch] = deque()
        self._wakeup_pending = False
        self._id = engine.attach(self._from_engine)
        self.opened = 0
        self.refused = 0

    def open(
        self, params: SynthParams, on_event: OnEvent, max_lead_s: float | None = None
    ) -> ContextHandle:
        """A new context (its ``params`` validated already); raises Overloaded."""
        cid = self.engine.reserve()
        if cid is None:
            self.refused += 1
            raise Overloaded("the engine is at capacity; retry in a moment")
        self.opened += 1
        self.engine.submit(Register(cid, self._id, max_lead_s))
        handle = ContextHandle(self, cid, on_event)
        self._handles[cid] = handle
        if self.runner.prepares_inline:
            outcome = self._prepare(cid, params)
            if isinstance(outcome, ContextFailed):
                handle.fail(outcome)
        else:
            future = self._prepare_pool.submit(self._prepare, cid, params)
            future.add_done_callback(
                lambda f: self._loop.call_soon_threadsafe(handle.prepared, f.result())
            )
        return handle

    def _prepare(self, cid: int, params: SynthParams) -> Prepared | ContextFailed:
        try:
            prepared = self.runner.prepare(params)
        except ModelInputError as exc:
            return ContextFailed(cid, exc.code, str(exc), exc.param)
        except Exception as exc:
            log.exception("preparing a context failed")
            return ContextFailed(cid, "internal_error", f"preparing the context failed: {exc}")
        self.engine.submit(Ready(cid, prepared))
        return prepared

    def _encode(self, cid: int, text: str, flush_id: int | None) -> ContextFailed | None:
        try:
            units = tuple(self.runner.encode_text(text)) if text else ()
        except ModelInputError as exc:
            return ContextFailed(cid, exc.code, str(exc), exc.param)
        except Exception as exc:
            log.exception("encoding text failed")
            return ContextFailed(cid, "internal_error", f"text frontend failed: {exc}")
        if units or flush_id is not None:
            self.engine.submit(AppendUnits(cid, units, flush_id))
        return None

    def _text_job(self, handle: ContextHandle, job: Callable[[], ContextFailed | None]) -> None:
        if self.runner.encodes_inline:
            failed = job()
            if failed is not None:
                handle.fail(failed)
            return
        future = self._text_pool.submit(job)

        def done(f: object) -> None:
            failed = future.result()
            if failed is not None:
                self._loop.call_soon_threadsafe(handle.fail, failed)

        future.add_done_callback(done)

    # -- events -------------------------------------------------------------------

    def _from_engine(self, batch: EngineBatch) -> None:
        """On the engine thread: queue the batch; wake the loop unless a wake-up is
        already on its way (a busy loop then takes several steps' batches at once)."""
        self._inbound.append(batch)
        if self._wakeup_pending:
            return
        self._wakeup_pending = True
        try:
            self._loop.call_soon_threadsafe(self._dispatch)
        except RuntimeError:
            pass  # the loop is gone: the server is stopping

    def _dispatch(self) -> None:
        self._wakeup_pending = False  # before draining: a batch queued now wakes us again
        while self._inbound:
            self._dispatch_batch(self._inbound.popleft())

    def _dispatch_batch(self, batch: EngineBatch) -> None:
        for event in batch.events:
            handle = self._handles.get(event.cid)
            if handle is None:
                continue
            if isinstance(event, ContextReleased | ContextFailed) or getattr(event, "final", False):
                self._handles.pop(event.cid, None)
                handle.ended = True
            if isinstance(event, ContextReleased):
                continue  # the front end forgot the context when it cancelled
            handle.on_event(event)

    @property
    def open_contexts(self) -> int:
        return len(self._handles)


class ContextHandle:
    """One context, from the front end's side. Calls are made on the event loop."""

    def __init__(self, client: EngineClient, cid: int, on_event: OnEvent) -> None:
        self.client = client
        self.cid = cid
        self.on_event = on_event
        self.ended = False
        self._failed = False

    def prepared(self, outcome: Prepared | ContextFailed) -> None:
        if isinstance(outcome, ContextFailed):
            self.fail(outcome)

    def append(self, text: str, flush_id: int | None = None) -> None:
        """Text (already cut into pieces the model takes whole); ``flush_id`` asks
        for an acknowledgement once everything sent so far has been spoken."""
        if self._failed:
            return
        client = self.client
        client._text_job(self, lambda: client._encode(self.cid, text, flush_id))

    def close_input(self) -> None:
        if self._failed:
            return
        engine = self.client.engine

        def close() -> None:
            engine.submit(CloseInput(self.cid))

        self.client._text_job(self, lambda: close())

    def throttle(self, paused: bool) -> None:
        self.client.engine.submit(Throttle(self.cid, paused))

    def cancel(self) -> None:
        """Free the context's slot (at once if the engine has not taken the context
        yet, else at its next step); no event follows."""
        if self.ended:
            return
        self.ended = True
        self.client._handles.pop(self.cid, None)
        engine = self.client.engine
        if not engine.retract(self.cid):
            engine.submit(Cancel(self.cid))

    def fail(self, event: ContextFailed) -> None:
        """A failure found before the engine ran the context (preparing, encoding):
        the context is cancelled now and its owner told on the next loop turn, never
        from inside the call that found it."""
        if self._failed or self.ended:
            return
        self._failed = True
        self.cancel()
        self.client._loop.call_soon(self.on_event, event)
