"""Speed by time-stretching: one context's engine events, its audio played faster or slower.

A context's speed is made by the model as far as the model can
(``Capabilities.split_speed``); the rest is this stage, between the engine and
every endpoint, so each endpoint (the native socket, HTTP, the vllm-omni socket,
the ones to come) gets the same audio and the same word times without knowing:

- audio chunks go through a :class:`~voiceserver.audio.stretch.TempoStretch` in the
  given pool (it is codec-like work: 0.4-3 ms of CPU per second of audio), one
  chunk at a time per context, in order; a chunk that completes a flush drains
  the filter (every sample so far goes out), the final chunk flushes its tail;
- word times are divided by the factor, so they stay on the stretched audio (the
  stretch's lengths are exact at every flush point and at the end);
- every other event keeps its place after the audio before it.

What the filter holds back, about 40-90 ms of the model's audio (two stages, for
factors past 2 or under 0.5: up to 200 ms; see ``bench/stretch_latency.py``), is
added to a stream's latency.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import replace

import numpy as np

from voiceserver.audio.stretch import TempoStretch
from voiceserver.engine.messages import AudioChunk, ContextFailed, EngineEvent
from voiceserver.engine.words import TimedWords

log = logging.getLogger(__name__)

Deliver = Callable[[EngineEvent | TimedWords], None]


def stretched_words(words: TimedWords, tempo: float) -> TimedWords:
    """``words`` with their times on audio played ``tempo`` times as fast."""
    return replace(
        words,
        words=tuple(
            replace(w, start_s=w.start_s / tempo, end_s=w.end_s / tempo) for w in words.words
        ),
    )


class StretchedEvents:
    """A context's event callback with its audio time-stretched by ``tempo``.

    Called on the event loop with the context's events, in order; delivers them to
    ``deliver`` in the same order, audio stretched (in ``pool``; in place when None).
    After :meth:`close` nothing more is delivered.
    """

    def __init__(
        self,
        deliver: Deliver,
        tempo: float,
        sample_rate: int,
        loop: asyncio.AbstractEventLoop,
        pool: Executor | None = None,
    ) -> None:
        self._deliver = deliver
        self.tempo = tempo
        self._stretch = TempoStretch(tempo, sample_rate)
        self._loop = loop
        self._pool = pool
        self._queue: deque[EngineEvent | TimedWords] = deque()
        self._busy = False
        """A chunk is in the pool (the stretch is the pool thread's until it is back)."""
        self.closed = False

    def __call__(self, event: EngineEvent | TimedWords) -> None:
        if self.closed:
            return
        if isinstance(event, TimedWords):
            event = stretched_words(event, self.tempo)
        self._queue.append(event)
        if not self._busy:
            self._pump()

    def close(self) -> None:
        """The context is over for its consumer (cancel, failure): drop what is queued."""
        if self.closed:
            return
        self.closed = True
        self._queue.clear()
        if not self._busy:
            self._stretch.close()

    def _pump(self) -> None:
        while self._queue and not self.closed:
            event = self._queue[0]
            if not isinstance(event, AudioChunk):
                self._queue.popleft()
                self._deliver(event)
                continue
            if self._pool is None:
                self._queue.popleft()
                self._emit(event, self._stretched(event))
                continue
            self._busy = True
            future = self._pool.submit(self._stretched, event)
            future.add_done_callback(self._back)
            return

    def _back(self, future: Future[np.ndarray]) -> None:
        try:
            self._loop.call_soon_threadsafe(self._done, future)
        except RuntimeError:
            pass  # the loop is gone: the server is stopping

    def _done(self, future: Future[np.ndarray]) -> None:
        self._busy = False
        if self.closed:
            self._stretch.close()
            return
        event = self._queue.popleft()
        assert isinstance(event, AudioChunk)
        try:
            pcm = future.result()
        except Exception as exc:  # a failing filter ends this context, never the others
            log.exception("time-stretching a context's audio failed")
            self.close()
            self._deliver(
                ContextFailed(
                    event.cid, "internal_error", f"time-stretching the audio failed: {exc}"
                )
            )
            return
        self._emit(event, pcm)
        self._pump()

    def _emit(self, chunk: AudioChunk, pcm: np.ndarray) -> None:
        # A chunk the filter kept whole is not worth an event unless it carries news.
        if len(pcm) or chunk.final or chunk.flush_ids or chunk.hit_limit:
            self._deliver(replace(chunk, pcm=pcm))

    def _stretched(self, chunk: AudioChunk) -> np.ndarray:
        """The stretched audio of one chunk (where the pool runs it)."""
        out = self._stretch.process(chunk.pcm)
        if chunk.final:
            rest = self._stretch.finish()
        elif chunk.flush_ids:
            rest = self._stretch.drain()
        else:
            return out
        return np.concatenate([out, rest]) if len(out) else rest
