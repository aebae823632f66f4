"""Tiny: a genuinely autoregressive, random-init model that costs microseconds.

It consumes its input one byte per frame while generating (like Qwen3-TTS's
streaming-text mode), waits when text runs dry before the input is closed,
and ends ``tail_frames`` after the last byte. Its vocoder is causal and
stateful, so chunked decoding equals whole decoding exactly. The audio is
noise-like but deterministic for a given seed and text, bit for bit whatever
else shares a batch: products are computed row by row, because a batched
matrix product's rounding depends on the batch's size.
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
    ARModel,
    Capabilities,
    ContextState,
    DecodeItem,
    LoadedModel,
    ModelInputError,
    StepOutput,
    SynthParams,
    TextFrontend,
    Vocoder,
    VoiceInfo,
    parse_options,
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


class ByteFrontend(TextFrontend):
    def encode(self, text: str, params: SynthParams) -> list[list[int]]:
        data = list(text.encode("utf-8"))
        return [data] if data else []


class TinyContext(ContextState):
    def __init__(self, slot: int, voice_index: int) -> None:
        self.slot = slot
        self.voice_index = voice_index
        self.pending: deque[int] = deque()
        self.input_closed = False
        self.tail_left: int | None = None
        self.frames = 0
        self.finished = False

    def feed(self, units: list[list[int]]) -> None:
        for unit in units:
            self.pending.extend(unit)

    def close_input(self) -> None:
        self.input_closed = True

    @property
    def has_work(self) -> bool:
        return not self.finished and (bool(self.pending) or self.input_closed)


class TinyAR(ARModel):
    def __init__(self, options: TinyOptions) -> None:
        self.options = options
        gen = torch.Generator().manual_seed(options.seed)
        h, d = options.hidden, options.frame_dim
        self.embed = torch.randn(PAD + 1, h, generator=gen) * 0.8
        self.voice_embed = torch.randn(len(options.voices), h, generator=gen) * 0.5
        self.w_h = torch.randn(h, h, generator=gen) * (0.9 / h**0.5)
        self.w_out = torch.randn(h, d, generator=gen) / h**0.5
        self.state = torch.zeros(options.max_contexts, h)
        self.free: list[int] = list(range(options.max_contexts - 1, -1, -1))
        self.frontend = ByteFrontend()
        self.capabilities = Capabilities(
            family="tiny",
            sample_rate=options.sample_rate,
            samples_per_frame=options.samples_per_frame,
            voices=tuple(VoiceInfo(v, "en") for v in options.voices),
            languages=("en",),
            streaming_text=True,
            max_frames_per_context=options.max_frames_per_context,
        )

    @property
    def max_contexts(self) -> int:
        return self.options.max_contexts

    @property
    def open_slots(self) -> int:
        return self.options.max_contexts - len(self.free)

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

    def open(self, params: SynthParams) -> TinyContext:
        slot = self.free.pop()
        self.state[slot] = self.voice_embed[self.options.voices.index(params.voice)]
        return TinyContext(slot, self.options.voices.index(params.voice))

    def close(self, state: ContextState) -> None:
        assert isinstance(state, TinyContext)
        self.free.append(state.slot)

    def step(self, states: list[ContextState]) -> list[StepOutput]:
        tokens, slots, emitting = [], [], []
        for state in states:
            assert isinstance(state, TinyContext)
            if state.pending:
                tokens.append(state.pending.popleft())
                emitting.append(True)
            else:  # input closed, generating the tail
                if state.tail_left is None:
                    state.tail_left = self.options.tail_frames
                tokens.append(PAD)
                emitting.append(state.tail_left > 0)
            slots.append(state.slot)
        index = torch.tensor(slots)
        hidden = torch.tanh(self.embed[torch.tensor(tokens)] + _rows(self.state[index], self.w_h))
        self.state[index] = hidden
        frames = _rows(hidden, self.w_out).numpy().astype(np.float32)
        outputs = []
        for row, state in enumerate(states):
            assert isinstance(state, TinyContext)
            if not emitting[row]:
                state.finished = True
                outputs.append(StepOutput(frames[:0], unit_end=True, finished=True))
                continue
            if state.tail_left is not None:
                state.tail_left -= 1
            state.frames += 1
            limit = state.frames >= self.options.max_frames_per_context
            state.finished = limit
            outputs.append(
                StepOutput(frames[row : row + 1], finished=limit, unit_end=limit, hit_limit=limit)
            )
        return outputs


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

    def new_stream(self) -> dict[str, np.ndarray]:
        return {"prev": np.zeros(self.frame_dim, np.float32)}

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        current, previous, counts = [], [], []
        for item in items:
            chunk = item.frames[item.start - item.frames_offset : item.end - item.frames_offset]
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
    return LoadedModel(ar=TinyAR(parsed), vocoder=TinyVocoder(parsed))
