"""Utterance: one engine context driven from async code without a WebSocket.

The HTTP shim, the batch endpoint and the compatibility WebSocket all speak
through this, so there is one pipeline behind every endpoint. Text is
segmented exactly as on the native WebSocket; audio comes back as model-rate
float32 chunks through an asyncio queue. The queue is bounded: above
``Limits.stream_ahead_s`` of audio not yet taken by the consumer the engine
pauses the context, and resumes it once half of that is taken, so a client
that reads slowly costs memory for that much audio, never for the whole file.

With ``word_timestamps`` (on a model that can align this context: see
``aligns_words``) the words' timing is collected as it arrives, always ahead
of the audio it describes: after :meth:`Utterance.events` yields a chunk,
:meth:`Utterance.take_words` holds every word that starts in the audio yielded
so far (and possibly later ones).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from models.base import SynthParams
from voiceserver.clients import ClientId
from voiceserver.engine.messages import AudioChunk, ContextFailed, EngineEvent
from voiceserver.engine.words import TimedWord, TimedWords
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
        *,
        word_timestamps: bool = False,
        first_chunk_frames: int | None = None,
        client: ClientId | None = None,
    ) -> None:
        """``split``: ``auto`` (clause/sentence segmentation), ``sentence`` (only
        sentence ends) or ``none`` (everything waits for flush/end). ``endpoint``
        labels this request's metrics (or pass the request's ``tracker``). ``live``:
        a listener plays the audio as it comes, so it is paced at real time beyond
        the engine's lead; otherwise (files) it runs ahead as fast as the device
        allows. ``word_timestamps``: collect word timing (``take_words``) when the
        model can align it; ``first_chunk_frames``: the first vocoder chunk's size
        (``EngineClient.open``); ``client``: whose share of the engine it counts
        against. Raises Overloaded when the engine cannot take it now (OverShare when
        the client holds its share), ModelInputError for a bad ``first_chunk_frames``."""
        self.rt = rt
        self.chars = 0
        self.samples = 0
        self.started_at = time.monotonic()
        self.first_audio_at: float | None = None
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[EngineEvent | TimedWords] = asyncio.Queue()
        self._timed: list[TimedWord] = []
        self._queued_samples = 0
        self._high_water = int(rt.server.limits.stream_ahead_s * rt.model.capabilities.sample_rate)
        self._paused = False
        self._finished = False
        self._ended = False
        config = rt.model_config.segmenter.with_split(split)  # type: ignore[arg-type]
        if rt.model.capabilities.streaming_text:
            timed = config.mode == "auto"  # timers only matter to a caller of poll()
            self._streamer: WordStreamer | None = WordStreamer(
                max_delay_ms=config.max_delay_ms if timed else None,
                end_delay_ms=config.end_delay_ms if timed else None,
            )
            self._segmenter: TextSegmenter | None = None
        else:
            self._streamer, self._segmenter = None, TextSegmenter(config)
        lead = None if live else rt.model_config.engine.offline_max_lead_s
        self.handle = rt.place().open(
            params,
            self._arrived,
            lead,
            word_timestamps=word_timestamps,
            first_chunk_frames=first_chunk_frames,
            client=client,
        )
        self.tracker = tracker or rt.metrics.track(endpoint)

    @property
    def cid(self) -> int:
        return self.handle.cid

    @property
    def aligns_words(self) -> bool:
        """Word timing will be collected (asked for, and the model can align it)."""
        return self.handle.aligns_words

    def take_words(self) -> list[TimedWord]:
        """Words timed since the last call, in order, times never decreasing; every
        word starting in audio :meth:`events` has yielded is among them or earlier."""
        words, self._timed = self._timed, []
        return words

    def _arrived(self, event: EngineEvent | TimedWords) -> None:
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
        if self._streamer is not None:
            for piece in self._streamer.push(text, time.monotonic()):
                self.handle.append(piece)
            return
        assert self._segmenter is not None
        for segment in self._segmenter.push(text, time.monotonic()):
            self.handle.append(segment.text, offset=segment.char_start)

    def deadline(self) -> float | None:
        """When :meth:`poll` should be called (monotonic seconds) for text held back
        waiting for a boundary (the segmenter's ``max_delay_ms``/``end_delay_ms``);
        None: nothing waits on a timer."""
        source = self._streamer if self._streamer is not None else self._segmenter
        return None if self._ended or source is None else source.deadline()

    def poll(self) -> None:
        """Speak the held text whose :meth:`deadline` has passed (text streamed in live
        that paused without a boundary), as the native socket's timers do."""
        if self._ended:
            return
        now = time.monotonic()
        if self._streamer is not None:
            for piece in self._streamer.poll(now):
                self.handle.append(piece)
        elif self._segmenter is not None:
            for segment in self._segmenter.poll(now):
                self.handle.append(segment.text, offset=segment.char_start)

    def flush(self, flush_id: int | None = None) -> None:
        rest = self._take_rest()
        if flush_id is not None:
            *rest, (last, offset) = rest or [("", None)]
        for piece, at in rest:
            self.handle.append(piece, offset=at)
        if flush_id is not None:
            self.handle.append(last, flush_id, offset)

    def end(self) -> None:
        if self._ended:
            return
        self._ended = True
        for piece, offset in self._take_rest():
            self.handle.append(piece, offset=offset)
        self.handle.close_input()

    def _take_rest(self) -> list[tuple[str, int | None]]:
        """What is still buffered, in pieces of bounded size, with each piece's offset
        in the text (None: right after the previous piece)."""
        if self._streamer is not None:
            return [(piece, None) for piece in self._streamer.flush()]
        assert self._segmenter is not None
        return [(segment.text, segment.char_start) for segment in self._segmenter.flush()]

    def cancel(self) -> None:
        if not self._finished:
            self._finished = True
            self.tracker.cancelled()
            self.handle.cancel()

    async def events(self) -> AsyncIterator[AudioChunk]:
        """Audio chunks until the final one; raises UtteranceError on failure."""
        while not self._finished:
            event = await self._queue.get()
            if isinstance(event, TimedWords):
                self._timed.extend(event.words)
                continue
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
