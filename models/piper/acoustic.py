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
from dataclasses import dataclass, field

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
from models.piper.durations import AcousticGraphs, Timed
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
    rest_of_unit: Timed | None = None
    """The current unit when only its first window is expanded: the rest's turn is
    the slot's next step."""
    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    """The latent's noise."""


@dataclass
class _Job:
    """One slot's acoustic call in a step."""

    state: _Slot
    unit: np.ndarray | None = None
    """A new unit's ids."""
    words: np.ndarray | None = None
    """Where the new unit's words are (None: no timing asked)."""
    window: int = 0
    """Expand only this many first frames now (0: the whole unit)."""
    rest_of: Timed | None = None
    """The unit whose frames after its first window are due."""


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
        first_window: int = 0,
    ) -> None:
        """``workers``: acoustic calls of one step run on this many threads at once
        (onnxruntime releases the GIL; a session takes concurrent calls).
        ``first_window``: latent frames of a context's first unit expanded at once,
        the rest in its next step (0: whole units; ``PiperOptions.first_window_frames``)."""
        self._graphs = graphs
        self._pool = ThreadPoolExecutor(workers, "piper-acoustic") if workers > 1 else None
        self.frontend = frontend
        self.capabilities = capabilities
        self._noise, self._length, self._noise_w = scales
        self._max_contexts = max_contexts
        self._first_window = first_window if graphs.expands_in_parts else 0
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
        # Every stepped context without frames in hand goes on with its unit (the
        # rest after a first window) or starts its next one: their acoustic calls
        # run together, then each hands out its frames.
        starting = [
            row
            for row, s in enumerate(states)
            if s.rest is None and (s.rest_of_unit is not None or s.pending)
        ]
        jobs = [self._job(states[row]) for row in starting]
        made = self._synthesize(jobs)
        for row, job, (latent, durations) in zip(starting, jobs, made, strict=True):
            state = states[row]
            state.rest = latent
            if job.words is not None and durations is not None:
                timed.extend(self._word_frames(row, state, job.words, durations))
        for row, state in enumerate(states):
            if state.rest is not None:
                out, rest = state.rest[:MAX_FRAMES_PER_STEP], state.rest[MAX_FRAMES_PER_STEP:]
                state.rest = rest if len(rest) else None
                frames.append(out)
                counts[row] = len(out)
                state.made += len(out)
                unit_end[row] = state.rest is None and state.rest_of_unit is None
            done = state.rest is None and state.rest_of_unit is None and not state.pending
            finished[row] = done and state.closed
            waiting[row] = done and not state.closed
        stacked = np.concatenate(frames) if frames else np.zeros((0, self.frame_dim), np.float32)
        return StepResult(
            counts, stacked, unit_end, finished, np.zeros(n, bool), waiting, WordFrames.of(timed)
        )

    def _job(self, state: _Slot) -> _Job:
        """What a starting slot's acoustic call is: the rest of its unit, or its next
        unit (a context's first in two parts, when its first window is short of it)."""
        if state.rest_of_unit is not None:
            timed, state.rest_of_unit = state.rest_of_unit, None
            return _Job(state, rest_of=timed)
        unit, words = state.pending.popleft(), state.words.popleft()
        window = self._first_window if state.made == 0 else 0
        return _Job(state, unit=unit, words=words, window=window)

    def _run(self, job: _Job) -> tuple[np.ndarray, np.ndarray | None]:
        graphs, state = self._graphs, job.state
        if job.rest_of is not None:
            return graphs.expand(job.rest_of)[self._first_window :], None
        assert job.unit is not None
        if not job.window:
            return graphs.run(job.unit, state.scales, state.speed, state.rng)
        timed = graphs.time(job.unit, state.scales, state.speed, state.rng)
        if not timed.splits_at(job.window):  # a part would cost the whole
            return graphs.expand(timed), timed.durations
        state.rest_of_unit = timed
        return graphs.expand(timed, job.window), timed.durations

    def _synthesize(self, jobs: list[_Job]) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """Each job's latent and frames per id (None: no new unit's timing): side by
        side on the pool when there is more than one."""
        if self._pool is None or len(jobs) < 2:
            return [self._run(job) for job in jobs]
        return list(self._pool.map(self._run, jobs))

    def _word_frames(
        self, row: int, state: _Slot, words: np.ndarray, durations: np.ndarray
    ) -> list[tuple[int, int, int, int]]:
        """``(row, word, start, end)`` of the words of a unit just synthesized, whose
        frames start after the ``state.made`` frames handed out before it."""
        edges = np.concatenate(([0], np.cumsum(durations))) + state.made
        out = []
        for word, first, end in words.tolist():
            if word > state.last_word:
                state.last_word = word
                out.append((row, word, int(edges[first]), int(edges[end])))
        return out
