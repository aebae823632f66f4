"""Utterance: one engine context driven from async code without a WebSocket.

The HTTP shim, the batch endpoint and the compatibility WebSocket all speak
through this, so there is one pipeline behind every endpoint. Text is
segmented exactly as on the native WebSocket; audio comes back as model-rate
float32 chunks through an asyncio queue. The queue is bounded: above
``Limits.stream_ahead_s`` of audio not yet taken by the consumer the engine
pauses the context, and resumes it once half of that is taken, so a client
that reads slowly costs memory for that much audio, never for the whole file.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from models.base import SynthParams
from voiceserver.engine.messages import AudioChunk, ContextFailed, EngineEvent
from voiceserver.metrics import RequestTracker
from voiceserver.runtime import Runtime
from voiceserver.text.segmenter import TextSegmenter
from voiceserver.text.words import WordStreamer


class UtteranceError(Exception):
    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.param = code, message, param


class Utterance:
    def __init__(
        self,
        rt: Runtime,
        params: SynthParams,
        split: str = "auto",
        endpoint: str = "http",
        live: bool = False,
        tracker: RequestTracker | None = None,
    ) -> None:
        """``split``: ``auto`` (clause/sentence segmentation), ``sentence`` (only
        sentence ends) or ``none`` (everything waits for flush/end). ``endpoint``
        labels this request's metrics (or pass the request's ``tracker``). ``live``:
        a listener plays the audio as it comes, so it is paced at real time beyond
        the engine's lead; otherwise (files) it runs ahead as fast as the device
        allows. Raises Overloaded when the engine cannot take it now."""
        self.rt = rt
        self.chars = 0
        self.samples = 0
        self.started_at = time.monotonic()
        self.first_audio_at: float | None = None
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[EngineEvent] = asyncio.Queue()
        self._queued_samples = 0
        self._high_water = int(rt.server.limits.stream_ahead_s * rt.model.capabilities.sample_rate)
        self._paused = False
        self._finished = False
        self._ended = False
        if rt.model.capabilities.streaming_text:
            self._words: WordStreamer | None = WordStreamer()
            self._segmenter: TextSegmenter | None = None
        else:
            config = rt.model_config.segmenter.with_split(split)  # type: ignore[arg-type]
            self._words, self._segmenter = None, TextSegmenter(config)
        lead = None if live else rt.model_config.engine.offline_max_lead_s
        self.handle = rt.client.open(params, self._arrived, lead)
        self.tracker = tracker or rt.metrics.track(endpoint)

    @property
    def cid(self) -> int:
        return self.handle.cid

    def _arrived(self, event: EngineEvent) -> None:
        if isinstance(event, AudioChunk):
            self._queued_samples += len(event.pcm)
            if not self._paused and self._queued_samples > self._high_water:
                self._paused = True
                self.handle.throttle(True)
        self._queue.put_nowait(event)

    def _taken(self, samples: int) -> None:
        self._queued_samples -= samples
        if self._paused and self._queued_samples <= self._high_water // 2:
            self._paused = False
            self.handle.throttle(False)

    def append(self, text: str) -> None:
        self.chars += len(text)
        self.tracker.text_arrived()
        if self._words is not None:
            for piece in self._words.push(text):
                self.handle.append(piece)
            return
        assert self._segmenter is not None
        for segment in self._segmenter.push(text, time.monotonic()):
            self.handle.append(segment.text)

    def flush(self, flush_id: int | None = None) -> None:
        rest = self._take_rest()
        if flush_id is not None:
            *rest, last = rest or [""]
        for piece in rest:
            self.handle.append(piece)
        if flush_id is not None:
            self.handle.append(last, flush_id)

    def end(self) -> None:
        if self._ended:
            return
        self._ended = True
        for piece in self._take_rest():
            self.handle.append(piece)
        self.handle.close_input()

    def _take_rest(self) -> list[str]:
        """What is still buffered, in pieces of bounded size."""
        if self._words is not None:
            return self._words.flush()
        assert self._segmenter is not None
        return [segment.text for segment in self._segmenter.flush()]

    def cancel(self) -> None:
        if not self._finished:
            self._finished = True
            self.tracker.cancelled()
            self.handle.cancel()

    async def events(self) -> AsyncIterator[AudioChunk]:
        """Audio chunks until the final one; raises UtteranceError on failure."""
        while not self._finished:
            event = await self._queue.get()
            if isinstance(event, ContextFailed):
                self._finished = True
                self.tracker.failed(event.code)
                raise UtteranceError(event.code, event.message, event.param)
            if isinstance(event, AudioChunk):
                self._taken(len(event.pcm))
                caps = self.rt.model.capabilities
                if len(event.pcm) and self.first_audio_at is None:
                    self.first_audio_at = time.monotonic()
                self.samples += len(event.pcm)
                self.tracker.audio(
                    len(event.pcm) / caps.sample_rate, len(event.pcm) // caps.samples_per_frame
                )
                if event.final:
                    self._finished = True
                    self.tracker.done()
                yield event

    @property
    def audio_s(self) -> float:
        return self.samples / self.rt.model.capabilities.sample_rate

    async def __aenter__(self) -> Utterance:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()  # frees the engine slot if the consumer went away early
