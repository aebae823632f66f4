"""VocoderLoop over the FrameRing: chunking, ordering, units and exactness."""

from __future__ import annotations

from typing import Any

import numpy as np

from models.base import DecodeItem, Vocoder
from models.tiny.model import TinyOptions, TinyVocoder
from voiceserver.engine.frames import FrameRing
from voiceserver.engine.vocoder_loop import VocoderLoop, VocoderLoopConfig


class WindowVocoder(Vocoder):
    """A windowed 'decoder' whose output depends on its context: sample = mean of the
    frames within ``left``/``right`` of each frame, inside the window it was given.
    Records every call as (stream, chunk frames)."""

    def __init__(self, right: int = 2, left: int = 2) -> None:
        self.sample_rate = 1000
        self.samples_per_frame = 10
        self.right_context = right
        self.left_context = left
        self.calls: list[list[tuple[Any, int]]] = []

    def new_stream(self, conditioning: Any = None) -> Any:
        return conditioning

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        self.calls.append([(i.stream, i.chunk_frames) for i in items])
        out = []
        for item in items:
            values = []
            for t in range(item.left, item.left + item.chunk_frames):
                lo = max(0, t - self.left_context)
                hi = min(len(item.frames), t + self.right_context + 1)
                values.append(float(item.frames[lo:hi].mean()))
            out.append(np.repeat(np.array(values, np.float32), self.samples_per_frame))
        return out


def make(
    vocoder: Vocoder,
    streams: int = 4,
    first: int = 1,
    max_chunk: int = 8,
    batch: int = 8,
    lead: float = 100.0,
    dim: int = 1,
) -> tuple[VocoderLoop, FrameRing]:
    ring = FrameRing(streams, 256, dim, np.float32)
    config = VocoderLoopConfig(first, max_chunk, batch, lead)
    return VocoderLoop(vocoder, ring, streams, config), ring


def push(ring: FrameRing, stream: int, frames: np.ndarray, unit_end: bool = False) -> None:
    ring.append(np.array([stream]), np.array([len(frames)]), frames, np.array([unit_end]))


def step(loop: VocoderLoop, now: float = 0.0, starved: tuple[int, ...] = ()) -> dict[int, Any]:
    mask = np.zeros(len(loop.active), bool)
    mask[list(starved)] = True
    decoded = loop.step(now, mask)
    return dict(zip(decoded.streams.tolist(), decoded.audio, strict=True))


def test_first_chunk_small_then_doubling_and_right_context_respected() -> None:
    voc = WindowVocoder(right=2)
    loop, ring = make(voc, first=1, max_chunk=4)
    loop.open(1, "s1")
    frames = np.arange(20, dtype=np.float32)[:, None]
    push(ring, 1, frames[:2])
    assert step(loop) == {}  # 2 frames, but 2 are needed as right context
    push(ring, 1, frames[2:3])
    out = step(loop)
    assert voc.calls[-1] == [("s1", 1)] and len(out[1]) == 10
    push(ring, 1, frames[3:], unit_end=True)
    sizes = []
    while out := step(loop):
        sizes.append(voc.calls[-1][0][1])
    assert sizes == [2, 4, 4, 4, 4, 1]
    assert loop.drained(np.array([1]))[0]


def test_chunked_equals_whole_with_a_windowed_vocoder() -> None:
    rng = np.random.default_rng(1)
    frames = rng.standard_normal((57, 3)).astype(np.float32)
    whole = WindowVocoder().decode([DecodeItem(None, frames)])[0]
    loop, ring = make(WindowVocoder(), first=1, max_chunk=16, dim=3)
    loop.open(3, None)
    pieces = []
    for start in range(0, 57, 5):  # frames trickle in
        push(ring, 3, frames[start : start + 5], unit_end=start + 5 >= 57)
        while out := step(loop):
            pieces.append(out[3])
    np.testing.assert_allclose(np.concatenate(pieces), whole)


def test_no_window_crosses_a_unit_boundary() -> None:
    """Two units back to back decode exactly as two separate utterances."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((9, 1)).astype(np.float32)
    b = rng.standard_normal((7, 1)).astype(np.float32)
    expected = np.concatenate(
        [
            WindowVocoder().decode([DecodeItem(None, a)])[0],
            WindowVocoder().decode([DecodeItem(None, b)])[0],
        ]
    )
    loop, ring = make(WindowVocoder(), first=2, max_chunk=3)
    loop.open(0, None)
    push(ring, 0, a, unit_end=True)
    push(ring, 0, b, unit_end=True)
    pieces = []
    while out := step(loop):
        pieces.append(out[0])
    np.testing.assert_allclose(np.concatenate(pieces), expected)


def test_tiny_stateful_vocoder_chunked_equals_whole() -> None:
    options = TinyOptions()
    frames = np.random.default_rng(2).standard_normal((40, options.frame_dim)).astype(np.float32)
    whole = TinyVocoder(options).decode([DecodeItem(TinyVocoder(options).new_stream(), frames)])[0]
    loop, ring = make(TinyVocoder(options), first=1, max_chunk=8, dim=options.frame_dim)
    loop.open(1, None)
    loop.open(2, None)  # a second stream in the same batches
    pieces = []
    for t in range(40):
        push(ring, 1, frames[t : t + 1], unit_end=t == 39)
        push(ring, 2, frames[39 - t : 40 - t], unit_end=t == 39)
        if 1 in (out := step(loop)):
            pieces.append(out[1])
    while out := step(loop):
        if 1 in out:
            pieces.append(out[1])
    np.testing.assert_allclose(np.concatenate(pieces), whole, atol=1e-6)


def test_starved_stream_emits_a_partial_chunk() -> None:
    loop, ring = make(WindowVocoder(right=0), first=4)
    loop.open(1, None)
    push(ring, 1, np.ones((2, 1), np.float32))
    assert step(loop) == {}
    assert len(step(loop, starved=(1,))[1]) == 20


def test_batch_orders_by_deadline_newcomer_first() -> None:
    voc = WindowVocoder(right=0)
    loop, ring = make(voc, first=1, max_chunk=1, batch=2)
    for stream in (1, 2, 3):
        loop.open(stream, stream)
    for stream in (1, 2):
        push(ring, stream, np.ones((10, 1), np.float32), unit_end=True)
    step(loop, 0.0)  # 1 and 2 emit 10 ms each at t=0
    push(ring, 3, np.ones((10, 1), np.float32), unit_end=True)
    out = step(loop, 0.005)
    assert set(out) == {3, 1}  # newcomer 3 first, then the earliest deadline (tie -> 1)


def test_stream_far_ahead_waits_and_a_paused_one_is_skipped() -> None:
    loop, ring = make(WindowVocoder(right=0), first=100, max_chunk=100, lead=0.5)
    loop.open(1, None)
    push(ring, 1, np.ones((200, 1), np.float32), unit_end=True)
    assert len(step(loop, 0.0)[1]) == 1000  # 1 s emitted
    assert step(loop, 0.1) == {}  # 0.9 s ahead > 0.5
    loop.paused[1] = True
    assert step(loop, 0.6) == {}
    loop.paused[1] = False
    assert 1 in step(loop, 0.6)


def test_the_ring_never_loses_a_frame_the_decoder_needs() -> None:
    loop, ring = make(WindowVocoder(right=0, left=4), first=8, max_chunk=8)
    loop.open(0, None)
    push(ring, 0, np.ones((200, 1), np.float32))
    assert ring.room(np.array([0]), loop.keep_from(np.array([0])))[0] == 56
    step(loop)
    # 8 frames decoded, 4 of them still kept as the next chunk's left context.
    assert ring.room(np.array([0]), loop.keep_from(np.array([0])))[0] == 56 + 4


class ClosingVocoder(WindowVocoder):
    """Records the streams given back."""

    def __init__(self) -> None:
        super().__init__(right=0)
        self.closed: list[Any] = []

    def close_stream(self, stream: Any) -> None:
        self.closed.append(stream)


def test_dropped_or_reopened_stream_is_closed_once() -> None:
    voc = ClosingVocoder()
    loop, ring = make(voc)
    loop.open(1, "a")
    loop.open(2, None)  # stateless: nothing to close
    loop.drop(1)
    loop.drop(1)
    loop.drop(2)
    assert voc.closed == ["a"]
    loop.open(1, "b")
    loop.open(1, "c")  # reopened without a drop: its old state goes back first
    assert voc.closed == ["a", "b"]
    push(ring, 1, np.ones((2, 1), np.float32))
    assert voc.calls == [] and len(step(loop)[1]) == 10
    assert voc.calls == [[("c", 1)]]


def test_a_zero_horizon_takes_first_chunks_and_late_streams_only() -> None:
    """What the engine decodes (and delivers) first after a step: newcomers' first
    chunks and streams whose audio already ran out, not those with audio in hand."""
    voc = WindowVocoder(right=0)
    loop, ring = make(voc, first=1, max_chunk=1)
    for stream in (1, 2, 3):
        loop.open(stream, stream)
    for stream in (1, 2):
        push(ring, stream, np.ones((10, 1), np.float32), unit_end=True)
    step(loop, 0.0)  # 1 and 2 each have 10 ms of audio from t=0
    push(ring, 3, np.ones((10, 1), np.float32), unit_end=True)
    decoded = loop.step(0.005, np.zeros(4, bool), 0.0)
    assert decoded.streams.tolist() == [3]  # 1 and 2 still have 5 ms in hand
    decoded = loop.step(0.015, np.zeros(4, bool), 0.0)
    assert sorted(decoded.streams.tolist()) == [1, 2]  # theirs ran out at 10 ms: late
