"""VocoderLoop chunking, ordering and exactness with the real tiny and Piper-like vocoders."""

from __future__ import annotations

import numpy as np

from models.base import DecodeItem, Vocoder
from models.tiny.model import TinyOptions, TinyVocoder
from voiceserver.engine.vocoder_loop import VocoderLoop, VocoderLoopConfig


class RecordingVocoder(Vocoder):
    """A windowed 'decoder' whose output depends on its context: sample = mean of the
    window around each frame. Records every call."""

    def __init__(self, right: int = 2, left: int = 2) -> None:
        self.sample_rate = 1000
        self.samples_per_frame = 10
        self.right_context = right
        self.left_context = left
        self.calls: list[list[tuple[int, int]]] = []

    def new_stream(self) -> None:
        return None

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        self.calls.append([(i.start, i.end) for i in items])
        out = []
        for item in items:
            values = []
            total = item.frames_offset + len(item.frames)
            for t in range(item.start, item.end):
                lo, hi = max(0, t - self.left_context), min(total, t + self.right_context + 1)
                window = item.frames[lo - item.frames_offset : hi - item.frames_offset]
                values.append(float(window.mean()))
            out.append(np.repeat(np.array(values, np.float32), self.samples_per_frame))
        return out


def cfg(
    first: int = 1, max_chunk: int = 8, batch: int = 8, lead: float = 100.0
) -> VocoderLoopConfig:
    return VocoderLoopConfig(
        first_chunk_frames=first, max_chunk_frames=max_chunk, max_batch=batch, max_lead_s=lead
    )


def test_first_chunk_small_then_doubling_and_right_context_respected() -> None:
    voc = RecordingVocoder(right=2)
    loop = VocoderLoop(voc, cfg(first=1, max_chunk=4))
    loop.open(1)
    frames = np.arange(20, dtype=np.float32)[:, None]
    loop.push(1, frames[:2], unit_end=False)
    assert loop.step(0.0, set()) == {}  # 2 frames, but 2 are needed as right context
    loop.push(1, frames[2:3], unit_end=False)
    out = loop.step(0.0, set())
    assert voc.calls[-1] == [(0, 1)]
    assert len(out[1]) == 10
    loop.push(1, frames[3:], unit_end=True)
    sizes = []
    while True:
        out = loop.step(0.0, set())
        if not out:
            break
        start, end = voc.calls[-1][0]
        sizes.append(end - start)
    assert sizes == [2, 4, 4, 4, 4, 1]
    assert loop.drained(1)


def test_chunked_equals_whole_with_windowed_vocoder() -> None:
    rng = np.random.default_rng(1)
    frames = rng.standard_normal((57, 3)).astype(np.float32)
    whole = RecordingVocoder().decode([DecodeItem(None, frames, 0, 57, True)])[0]
    loop = VocoderLoop(RecordingVocoder(), cfg(first=1, max_chunk=16))
    loop.open(7)
    pieces = []
    for start in range(0, 57, 5):  # frames trickle in
        loop.push(7, frames[start : start + 5], unit_end=start + 5 >= 57)
        while out := loop.step(0.0, set()):
            pieces.append(out[7])
    np.testing.assert_allclose(np.concatenate(pieces), whole)


def test_tiny_stateful_vocoder_chunked_equals_whole() -> None:
    options = TinyOptions()
    frames = np.random.default_rng(2).standard_normal((40, options.frame_dim)).astype(np.float32)
    whole = TinyVocoder(options).decode(
        [DecodeItem(TinyVocoder(options).new_stream(), frames, 0, 40, True)]
    )[0]
    loop = VocoderLoop(TinyVocoder(options), cfg(first=1, max_chunk=8))
    loop.open(1)
    loop.open(2)  # a second context in the same batches
    pieces = []
    for t in range(40):
        loop.push(1, frames[t : t + 1], unit_end=t == 39)
        loop.push(2, frames[39 - t : 40 - t], unit_end=t == 39)
        out = loop.step(0.0, set())
        if 1 in out:
            pieces.append(out[1])
    while out := loop.step(0.0, set()):
        if 1 in out:
            pieces.append(out[1])
    np.testing.assert_allclose(np.concatenate(pieces), whole, atol=1e-6)


def test_starved_context_emits_partial_chunk() -> None:
    voc = RecordingVocoder(right=0)
    loop = VocoderLoop(voc, cfg(first=4))
    loop.open(1)
    loop.push(1, np.ones((2, 1), np.float32), unit_end=False)
    assert loop.step(0.0, set()) == {}
    assert len(loop.step(0.0, {1})[1]) == 20


def test_batch_orders_by_deadline_newcomer_first() -> None:
    voc = RecordingVocoder(right=0)
    loop = VocoderLoop(voc, cfg(first=1, max_chunk=1, batch=2))
    for cid in (1, 2, 3):
        loop.open(cid)
    for cid in (1, 2):
        loop.push(cid, np.ones((10, 1), np.float32), unit_end=True)
    loop.step(0.0, set())  # 1 and 2 emit 10 ms each at t=0
    loop.push(1, np.zeros((0, 1), np.float32), unit_end=False)
    loop.push(3, np.ones((10, 1), np.float32), unit_end=True)
    out = loop.step(0.005, set())
    assert set(out) == {3, 1}  # newcomer 3 first, then the earliest deadline (tie -> 1)


def test_context_far_ahead_waits() -> None:
    voc = RecordingVocoder(right=0)
    loop = VocoderLoop(voc, cfg(first=100, max_chunk=100, lead=0.5))
    loop.open(1)
    loop.push(1, np.ones((200, 1), np.float32), unit_end=True)
    assert len(loop.step(0.0, set())[1]) == 1000  # 1 s emitted
    assert loop.step(0.1, set()) == {}  # 0.9 s ahead > 0.5
    assert 1 in loop.step(0.6, set())
