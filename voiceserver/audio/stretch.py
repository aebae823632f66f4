"""Streaming time-stretch of one mono stream without changing its pitch.

FFmpeg's ``atempo`` filter (WSOLA) through PyAV's filter graph. ``atempo`` takes a
factor from 0.5 to 2.0 per stage with its best quality there, so a factor outside
that range runs as two chained stages (0.25 = 0.5 x 0.5, 4.0 = 2.0 x 2.0).

Lengths are exact where it matters: at a drain point and at the end, the output
so far is exactly ``round(samples_in / tempo)`` samples, so word times scaled by
``1 / tempo`` stay on the audio however many flush points a context has. Draining
pushes silence through until everything received so far is out, then cuts the
output at the exact length and starts a fresh filter.

Latency: ``atempo`` sends a frame's output only once all of it is made, which takes
its window (about 40 ms of audio) past the frame's end; fed a vocoder chunk whole, it
would hold the whole chunk back (measured: 320 ms chunks, 312 ms held). So chunks go
in as 10 ms frames: 35-50 ms of audio held for one stage, 140 ms for two (4x), at
2-3.5 ms of CPU per second of audio (``bench/stretch_latency.py``).
"""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np

from voiceserver.audio.resample import as_mono_float32

TEMPO_MIN = 0.25
TEMPO_MAX = 4.0
STAGE_MIN = 0.5
STAGE_MAX = 2.0
"""The range one ``atempo`` stage is made for."""

_EMPTY = np.zeros(0, dtype=np.float32)
_FRAME_MS = 10
"""Audio handed to the filter at a time (see the module's docstring)."""
_PUSH_MS = 50
"""Silence pushed per round while draining."""
_MAX_DRAIN_ROUNDS = 200
"""Bound on draining rounds (10 s of silence): the filter's window is far shorter."""


def tempo_stages(tempo: float) -> list[float]:
    """The ``atempo`` factors whose product is ``tempo``, each within 0.5..2.0.

    Two stages where one cannot do it. The first stage is the one nearer to 1 when
    speeding up and the extreme one when slowing down, so the second stage's window
    fills from the first one's output in the least input time (less latency)."""
    if not TEMPO_MIN <= tempo <= TEMPO_MAX:
        raise ValueError(f"tempo must be from {TEMPO_MIN} to {TEMPO_MAX}, got {tempo}")
    if tempo > STAGE_MAX:
        return [tempo / STAGE_MAX, STAGE_MAX]
    if tempo < STAGE_MIN:
        return [STAGE_MIN, tempo / STAGE_MIN]
    return [tempo]


class TempoStretch:
    """Play one continuous stream ``tempo`` times as fast, at the same pitch.

    ``process`` returns what is ready (nothing until the filter's window is full),
    ``drain`` everything received so far (a flush point; the stream goes on),
    ``finish`` the rest at the end. Not thread-safe; any one thread at a time.
    """

    def __init__(self, tempo: float, sample_rate: int) -> None:
        self.stages = tempo_stages(tempo)
        self.tempo = tempo
        self.sample_rate = sample_rate
        self.samples_in = 0
        self.samples_out = 0
        self._pts = 0
        self._graph: av.filter.Graph | None = None
        self._finished = False

    def expected_out(self) -> int:
        """Output samples that all input so far plays for."""
        return round(self.samples_in / self.tempo)

    def process(self, x: np.ndarray) -> np.ndarray:
        """Feed the next chunk; return the samples that are ready (maybe none)."""
        if self._finished:
            raise RuntimeError("TempoStretch.process() after finish()")
        x = as_mono_float32(x)
        if not len(x):
            return _EMPTY
        self.samples_in += len(x)
        out = self._run(x)
        # The filter never runs ahead of its input, but the exact length is a promise.
        out = out[: max(0, self.expected_out() - self.samples_out)]
        self.samples_out += len(out)
        return out

    def drain(self) -> np.ndarray:
        """Everything received so far, to the exact length; the stream carries on with
        a fresh filter (at a flush point, where speech has paused)."""
        if self._finished:
            return _EMPTY
        return self._drain()

    def finish(self) -> np.ndarray:
        """End of the stream: the rest, to the exact length."""
        if self._finished:
            raise RuntimeError("TempoStretch.finish() called twice")
        out = self._drain()
        self._finished = True
        return out

    def close(self) -> None:
        """Abandon the stream (cancel)."""
        self._finished = True
        self._graph = None

    def _drain(self) -> np.ndarray:
        want = self.expected_out() - self.samples_out
        pieces: list[np.ndarray] = []
        have = 0
        if self._graph is not None and want > 0:
            silence = np.zeros(max(1, self.sample_rate * _PUSH_MS // 1000), np.float32)
            for _ in range(_MAX_DRAIN_ROUNDS):
                piece = self._run(silence)
                pieces.append(piece)
                have += len(piece)
                if have >= want:
                    break
        self._graph = None  # the next chunk starts a fresh filter
        out = np.concatenate(pieces) if pieces else _EMPTY
        want = max(0, want)
        if len(out) < want:  # never in practice; the length is what times rely on
            out = np.concatenate([out, np.zeros(want - len(out), np.float32)])
        out = out[:want]
        self.samples_out += len(out)
        return out

    def _run(self, x: np.ndarray) -> np.ndarray:
        graph = self._graph or self._new_graph()
        step = max(1, self.sample_rate * _FRAME_MS // 1000)
        out: list[np.ndarray] = []
        for start in range(0, len(x), step):
            piece = np.ascontiguousarray(x[start : start + step])
            frame = av.AudioFrame.from_ndarray(piece.reshape(1, -1), format="flt", layout="mono")
            frame.sample_rate = self.sample_rate
            frame.time_base = Fraction(1, self.sample_rate)
            frame.pts = self._pts
            self._pts += len(piece)
            graph.push(frame)
            while True:
                try:
                    done = graph.pull()
                except (av.BlockingIOError, av.EOFError):
                    break
                out.append(done.to_ndarray().reshape(-1))
        if not out:
            return _EMPTY
        return np.concatenate(out).astype(np.float32, copy=False)

    def _new_graph(self) -> av.filter.Graph:
        graph = av.filter.Graph()
        node = graph.add_abuffer(
            format="flt",
            sample_rate=self.sample_rate,
            layout="mono",
            time_base=Fraction(1, self.sample_rate),
        )
        for factor in self.stages:
            stage = graph.add("atempo", f"{factor:.9g}")
            node.link_to(stage)
            node = stage
        sink = graph.add("abuffersink")
        node.link_to(sink)
        graph.configure()
        self._graph = graph
        self._pts = 0
        return graph
