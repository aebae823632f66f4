"""Tiny: a genuinely autoregressive, random-init model that costs microseconds.

It consumes its input one byte per frame while generating (like Qwen3-TTS's
streaming-text mode), waits when text runs dry before the input is closed,
and ends ``tail_frames`` after the last byte. Its vocoder is causal and
stateful, so chunked decoding equals whole decoding exactly. The audio is
noise-like but deterministic for a given seed and text, bit for bit whatever
else shares a batch: products are computed row by row, because a batched
matrix product's rounding depends on the batch's size.

Word timing is exact by construction: a word's bytes become consecutive
frames, so the word spans frames ``[f, f + its bytes)`` where ``f`` is the frame
made from its first byte.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.base import (
    AlignedText,
    Capabilities,
    DecodeItem,
    LoadedModel,
    ModelInputError,
    ModelRunner,
    Prepared,
    RequestField,
    StepPlan,
    StepResult,
    SynthParams,
    Vocoder,
    VoiceInfo,
    WordFrames,
    parse_options,
    word_spans,
)

PAD = 256


@dataclass(frozen=True)
class TinyOptions:
    hidden: int = 32
    """Recurrent state width."""
    frame_dim: int = 8
    """Width of one frame (the 'codec' the vocoder decodes)."""
    sample_rate: int = 16000
    samples_per_frame: int = 320
    """20 ms frames at 16 kHz."""
    tail_frames: int = 3
    """Frames generated after the last input byte once input is closed."""
    max_contexts: int = 64
    max_frames_per_context: int = 4000
    seed: int = 0
    voices: tuple[str, ...] = ("tiny-a", "tiny-b")


@dataclass
class TinyPrepared(Prepared):
    voice_index: int = 0
    tail_frames: int = 0


class TinyRunner(ModelRunner):
    """One byte of input per frame; per-slot state in arrays and deques."""

    frame_dtype = np.float32
    max_frames_per_step = 1
    prepares_inline = True
    encodes_inline = True

    def __init__(self, options: TinyOptions) -> None:
        self.options = options
        gen = torch.Generator().manual_seed(options.seed)
        h, d = options.hidden, options.frame_dim
        self.frame_dim = d
        self.embed = torch.randn(PAD + 1, h, generator=gen) * 0.8
        self.voice_embed = torch.randn(len(options.voices), h, generator=gen) * 0.5
        self.w_h = torch.randn(h, h, generator=gen) * (0.9 / h**0.5)
        self.w_out = torch.randn(h, d, generator=gen) / h**0.5
        n = options.max_contexts
        self.state = torch.zeros(n, h)
        self.pending: list[deque[int]] = [deque() for _ in range(n)]
        self.closed = np.zeros(n, bool)
        self.tail_left = np.zeros(n, np.int64)
        self.active = np.zeros(n, bool)
        self.made = np.zeros(n, np.int64)
        """Frames each slot made so far."""
        self.taken = np.zeros(n, np.int64)
        """Input bytes each slot consumed so far."""
        self.fed = np.zeros(n, np.int64)
        """Input bytes each slot was fed so far."""
        self.word_starts: list[deque[tuple[int, int, int]]] = [deque() for _ in range(n)]
        """Per slot, words not reached yet: (first byte's position, bytes, word index)."""
        self.capabilities = Capabilities(
            family="tiny",
            sample_rate=options.sample_rate,
            samples_per_frame=options.samples_per_frame,
            voices=tuple(VoiceInfo(v, "en") for v in options.voices),
            languages=("en",),
            streaming_text=True,
            max_frames_per_context=options.max_frames_per_context,
            request_fields=(
                RequestField(
                    "tail_frames",
                    "integer",
                    0,
                    100,
                    doc="frames made after the last byte once the text has ended",
                    default=options.tail_frames,
                ),
            ),
        )

    @property
    def max_slots(self) -> int:
        return self.options.max_contexts

    @property
    def open_slots(self) -> int:
        return int(self.active.sum())

    def validate(self, params: SynthParams) -> None:
        if params.voice not in self.options.voices:
            raise ModelInputError(
                f"unknown voice {params.voice!r}; available: {', '.join(self.options.voices)}",
                param="voice",
                code="unknown_voice",
            )
        if params.language not in self.capabilities.languages:
            raise ModelInputError(
                f"unsupported language {params.language!r}; supported: en",
                param="language",
                code="unsupported_language",
            )

    def prepare(self, params: SynthParams) -> TinyPrepared:
        self.validate(params)
        tail = params.extra.get("tail_frames", self.options.tail_frames)
        return TinyPrepared(voice_index=self.options.voices.index(params.voice), tail_frames=tail)

    def encode_text(self, text: str) -> list[np.ndarray]:
        data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)
        return [data] if len(data) else []

    def aligns_words(self, params: SynthParams) -> bool:
        return True

    def encode_aligned(self, text: str) -> AlignedText:
        units = self.encode_text(text)
        spans = word_spans(text)
        # Character offsets -> byte offsets in the unit (UTF-8 is variable length).
        byte_at = np.cumsum([0] + [len(ch.encode("utf-8")) for ch in text])
        table = np.column_stack(
            (np.arange(len(spans)), byte_at[spans[:, 0]], byte_at[spans[:, 1]])
        ).astype(np.int64)
        return AlignedText(units, [table] if units else [], spans)

    def execute(self, plan: StepPlan) -> StepResult:
        for slot in plan.free.tolist():
            self.active[slot] = False
            self.pending[slot].clear()
        for admit in plan.admit:
            assert isinstance(admit.prepared, TinyPrepared)
            slot = admit.slot
            self.state[slot] = self.voice_embed[admit.prepared.voice_index]
            self.pending[slot].clear()
            self.closed[slot] = False
            self.tail_left[slot] = admit.prepared.tail_frames
            self.active[slot] = True
            self.made[slot] = self.taken[slot] = self.fed[slot] = 0
            self.word_starts[slot].clear()
        for feed in plan.feed:
            slot = feed.slot
            for i, unit in enumerate(feed.units):
                if feed.words:
                    for word, first, end in feed.words[i].tolist():
                        self.word_starts[slot].append(
                            (int(self.fed[slot]) + first, end - first, word)
                        )
                self.pending[slot].extend(unit.tolist())
                self.fed[slot] += len(unit)
            self.closed[slot] |= feed.close
        return self._step(plan.step)

    def _step(self, slots: np.ndarray) -> StepResult:
        n = len(slots)
        counts = np.zeros(n, np.int64)
        finished = np.zeros(n, bool)
        waiting = np.zeros(n, bool)
        tokens, rows = [], []
        timed: list[tuple[int, int, int, int]] = []
        for row, slot in enumerate(slots.tolist()):
            if self.pending[slot]:
                tokens.append(self.pending[slot].popleft())
                starts = self.word_starts[slot]
                while starts and starts[0][0] <= self.taken[slot]:
                    _, size, word = starts.popleft()
                    frame = int(self.made[slot])
                    timed.append((row, word, frame, frame + size))
                self.taken[slot] += 1
            elif not self.closed[slot]:
                waiting[row] = True  # starved for text
                continue
            elif self.tail_left[slot] > 0:
                self.tail_left[slot] -= 1
                tokens.append(PAD)
            else:
                finished[row] = True
                continue
            rows.append(row)
        frames = np.zeros((0, self.frame_dim), np.float32)
        if rows:
            index = torch.from_numpy(slots[rows])
            state = _rows(self.state[index], self.w_h)
            hidden = torch.tanh(self.embed[torch.tensor(tokens)] + state)
            self.state[index] = hidden
            frames = _rows(hidden, self.w_out).numpy().astype(np.float32)
            counts[rows] = 1
            self.made[slots[rows]] += 1
        for row, slot in enumerate(slots.tolist()):
            if counts[row] and not self.pending[slot] and self.closed[slot]:
                finished[row] = self.tail_left[slot] == 0
        unit_end = finished.copy()
        return StepResult(
            counts, frames, unit_end, finished, np.zeros(n, bool), waiting, WordFrames.of(timed)
        )


def _rows(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight`` one row at a time: each row's result is independent of the others."""
    if len(x) == 0:
        return x.new_zeros((0, weight.shape[1]))
    return torch.stack([row @ weight for row in x])


class TinyVocoder(Vocoder):
    """y[t] = tanh(A f[t] + B f[t-1]) per frame, spread over the frame's samples."""

    def __init__(self, options: TinyOptions) -> None:
        gen = torch.Generator().manual_seed(options.seed + 1)
        d, n = options.frame_dim, options.samples_per_frame
        self.a = torch.randn(d, n, generator=gen) / d**0.5
        self.b = torch.randn(d, n, generator=gen) / d**0.5
        self.sample_rate = options.sample_rate
        self.samples_per_frame = n
        self.frame_dim = d

    def new_stream(self, conditioning: Any = None) -> dict[str, np.ndarray]:
        return {"prev": np.zeros(self.frame_dim, np.float32)}

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        current, previous, counts = [], [], []
        for item in items:
            chunk = item.frames[item.left : len(item.frames) - item.right]
            prev = np.concatenate([item.stream["prev"][None], chunk[:-1]]) if len(chunk) else chunk
            current.append(chunk)
            previous.append(prev)
            counts.append(len(chunk))
            if len(chunk):
                item.stream["prev"] = chunk[-1].copy()
        cur = torch.from_numpy(np.concatenate(current))
        prev = torch.from_numpy(np.concatenate(previous))
        audio = (0.5 * torch.tanh(_rows(cur, self.a) + _rows(prev, self.b))).numpy()
        out, row = [], 0
        for count in counts:
            out.append(audio[row : row + count].reshape(-1).astype(np.float32))
            row += count
        return out


def load(raw_options: Mapping[str, Any], checkpoint: Path | None = None) -> LoadedModel:
    options = dict(raw_options)
    if "voices" in options:
        options["voices"] = tuple(options["voices"])
    parsed = parse_options(TinyOptions, options, "model")
    return LoadedModel(runner=TinyRunner(parsed), vocoder=TinyVocoder(parsed))
