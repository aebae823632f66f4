"""Piper's acoustic stage as a ModelRunner: one sentence (unit) -> its latent frames.

A step synthesizes one unit per stepped slot (one onnxruntime call each; units
are capped in size by the frontend). A unit longer than ``max_frames_per_step``
is handed out over several steps, so the engine's frame buffers stay bounded.

Word timing is exact: the acoustic stage returns how many latent frames each
phoneme id gets (the duration predictor's rounded output scaled for speed, which
the latent is expanded by), so a word's frames are the sum over the ids before it
and over its own. They are reported in the step that synthesizes the word's unit,
before any of its frames reach the vocoder.

Speed: the model makes the part of a context's speed within
``Capabilities.speed_range`` by scaling the frames per id
(``models.piper.durations``); the server stretches the audio by the rest.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from models.base import (
    AlignedText,
    Capabilities,
    ModelInputError,
    ModelRunner,
    Prepared,
    StepPlan,
    StepResult,
    SynthParams,
    WordFrames,
)
from models.fields import SPEED
from models.piper.durations import AcousticGraphs
from models.piper.frontend import PiperFrontend

MAX_FRAMES_PER_STEP = 128
"""Latent frames (~1.5 s of audio) one step hands out for a slot: the engine's frame
ring holds a few steps' worth per stream, so this keeps it small."""


@dataclass
class PiperPrepared(Prepared):
    scales: np.ndarray | None = None
    """noise, length, noise_w scales of this context."""
    speed: float = 1.0
    """The speed the model makes (the native part of the context's speed)."""


@dataclass
class _Slot:
    scales: np.ndarray
    speed: float
    pending: deque[np.ndarray]
    words: deque[np.ndarray | None]
    """Per pending unit, where its words are (None: no timing asked)."""
    closed: bool = False
    rest: np.ndarray | None = None
    """Frames of the current unit not handed out yet."""
    made: int = 0
    """Frames of this context synthesized before the current unit's rest."""
    last_word: int = -1
    """The last word reported (a word cut across units is reported once)."""


class PiperRunner(ModelRunner):
    frame_dtype = np.float32
    max_frames_per_step = MAX_FRAMES_PER_STEP
    prepares_inline = True

    def __init__(
        self,
        graphs: AcousticGraphs,
        frontend: PiperFrontend,
        capabilities: Capabilities,
        scales: tuple[float, float, float],
        max_contexts: int,
        workers: int = 1,
    ) -> None:
        """``workers``: acoustic calls of one step run on this many threads at once
        (onnxruntime releases the GIL; a session takes concurrent calls)."""
        self._graphs = graphs
        self._pool = ThreadPoolExecutor(workers, "piper-acoustic") if workers > 1 else None
        self.frontend = frontend
        self.capabilities = capabilities
        self._noise, self._length, self._noise_w = scales
        self._max_contexts = max_contexts
        self._slots: dict[int, _Slot] = {}
        self.frame_dim = graphs.channels

    @property
    def max_slots(self) -> int:
        return self._max_contexts

    def validate(self, params: SynthParams) -> None:
        voices = [v.name for v in self.capabilities.voices]
        if params.voice not in voices:
            raise ModelInputError(
                f"unknown voice {params.voice!r}; available: {', '.join(voices)}",
                param="voice",
                code="unknown_voice",
            )
        if params.language not in self.capabilities.languages:
            raise ModelInputError(
                f"unsupported language {params.language!r}; supported: "
                + ", ".join(self.capabilities.languages),
                param="language",
                code="unsupported_language",
            )
        SPEED.check(params.speed)

    def prepare(self, params: SynthParams) -> PiperPrepared:
        self.validate(params)
        scales = np.array([self._noise, self._length, self._noise_w], np.float32)
        native, _ = self.capabilities.split_speed(params.speed)
        return PiperPrepared(scales=scales, speed=native)

    def encode_text(self, text: str) -> list[np.ndarray]:
        return [np.asarray(ids, np.int64) for ids in self.frontend.encode(text)]

    def aligns_words(self, params: SynthParams) -> bool:
        return self._graphs.has_durations and self.frontend.aligns_words

    def encode_aligned(self, text: str) -> AlignedText:
        return self.frontend.encode_aligned(text)

    def execute(self, plan: StepPlan) -> StepResult:
        for slot in plan.free.tolist():
            self._slots.pop(slot, None)
        for admit in plan.admit:
            assert isinstance(admit.prepared, PiperPrepared) and admit.prepared.scales is not None
            prepared = admit.prepared
            self._slots[admit.slot] = _Slot(prepared.scales, prepared.speed, deque(), deque())
        for feed in plan.feed:
            state = self._slots[feed.slot]
            state.pending.extend(feed.units)
            state.words.extend(feed.words or [None] * len(feed.units))
            state.closed |= feed.close
        n = len(plan.step)
        counts = np.zeros(n, np.int64)
        unit_end = np.zeros(n, bool)
        finished = np.zeros(n, bool)
        waiting = np.zeros(n, bool)
        frames: list[np.ndarray] = []
        timed: list[tuple[int, int, int, int]] = []
        states = [self._slots[slot] for slot in plan.step.tolist()]
        # Every stepped context without frames in hand starts its next unit: their
        # acoustic calls run together, then each hands out its frames.
        starting = [row for row, s in enumerate(states) if s.rest is None and s.pending]
        work = [(states[row].pending.popleft(), states[row]) for row in starting]
        words = [states[row].words.popleft() for row in starting]
        made = self._synthesize(work)
        for row, unit_words, (latent, durations) in zip(starting, words, made, strict=True):
            states[row].rest = latent
            if unit_words is not None and durations is not None:
                timed.extend(self._word_frames(row, states[row], unit_words, durations))
        for row, state in enumerate(states):
            if state.rest is not None:
                out, rest = state.rest[:MAX_FRAMES_PER_STEP], state.rest[MAX_FRAMES_PER_STEP:]
                state.rest = rest if len(rest) else None
                frames.append(out)
                counts[row] = len(out)
                state.made += len(out)
                unit_end[row] = state.rest is None
            done = state.rest is None and not state.pending
            finished[row] = done and state.closed
            waiting[row] = done and not state.closed
        stacked = np.concatenate(frames) if frames else np.zeros((0, self.frame_dim), np.float32)
        return StepResult(
            counts, stacked, unit_end, finished, np.zeros(n, bool), waiting, WordFrames.of(timed)
        )

    def _synthesize(
        self, work: list[tuple[np.ndarray, _Slot]]
    ) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """Each unit's latent and frames per id: side by side on the pool when there is
        more than one."""

        def run(item: tuple[np.ndarray, _Slot]) -> tuple[np.ndarray, np.ndarray | None]:
            unit, state = item
            return self._graphs.run(unit, state.scales, state.speed)

        if self._pool is None or len(work) < 2:
            return [run(item) for item in work]
        return list(self._pool.map(run, work))

    def _word_frames(
        self, row: int, state: _Slot, words: np.ndarray, durations: np.ndarray
    ) -> list[tuple[int, int, int, int]]:
        """``(row, word, start, end)`` of the words of a unit just synthesized, whose
        frames start after the ``state.made`` frames handed out before it."""
        assert state.rest is not None
        frames = len(state.rest)
        edges = np.minimum(np.concatenate(([0], np.cumsum(durations))), frames) + state.made
        out = []
        for word, first, end in words.tolist():
            if word > state.last_word:
                state.last_word = word
                out.append((row, word, int(edges[first]), int(edges[end])))
        return out
