"""Where a context's phone pointer stands, and how its text grows: the host side of a
VoXtream2 context, as the reference's generation loop keeps it.

Phone positions count the context's phone features after punctuation is taken out:
the prompt's ``P`` placeholders first, then the text's phones, and once the text has
ended a silence and an end token. Each frame the model picks a move (``moves``: shift
the pointer by 0-2 phones and read 1 or 2 phones); :meth:`Track.move` applies it with the
reference's rules (a state seen too often is pushed on), notes the end once the pointer
passes the last phone, and keeps the speaking-rate counts.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class PointerRules:
    moves: tuple[tuple[int, int], ...] = ((0, 1), (0, 2), (1, 1), (1, 2), (2, 1), (2, 2))
    """Per move: (shift, phones read) (the reference's ``phoneme_index_map``)."""
    phones_per_frame: int = 2
    min_look_ahead: int = 3
    """Phones past the pointer a frame waits for while text may still come."""
    repeat_limit: int = 25
    """A (start, end) state seen more often than this is pushed one phone on."""
    rate_window: int = 38
    """Frames the current speaking-rate counts cover (3 s)."""


@dataclass
class Track:
    """One context's text and pointer (host state, indexed by the runner's slot)."""

    prompt: int
    """Phone positions of the prompt (its frames + 1)."""
    tokens: list[np.ndarray]
    """The token ids so far, in pieces (the prompt's placeholders first)."""
    punctuation: list[int]
    """Positions (in the tokens) of punctuation tokens, taken out after the encoder."""
    length: int
    """Tokens so far."""
    ended: bool = False
    """The text is complete: silence and the end token are in."""
    cut: bool = False
    """The text was cut at the phone limit (the context ends at a limit)."""
    phone_count: int = 0
    """Phones the pointer may stand on (``phone_seq_len``)."""
    pointer: int = 0
    """The last phone the pointer read (``phone_emb_max_idx``)."""
    pair: tuple[int, int] = (0, 0)
    """The phones the next frame reads."""
    eos_step: int = 1 << 62
    steps: int = 0
    """Frames generated."""
    seen: dict[tuple[int, int], int] = field(default_factory=dict)
    counts: np.ndarray = field(default_factory=lambda: np.ones(6, np.int64))
    history: deque[int] = field(default_factory=deque)
    last_code0: int = 0
    """The previous frame's first code (audio pairs it with this frame's others)."""
    position: int = 0
    """The temporal cache's next position."""
    words: deque[tuple[int, int, int]] = field(default_factory=deque)
    """Words fed with timing asked for and not yet reached: (index, first phone, end)."""

    @classmethod
    def new(cls, prompt: int, prompt_tokens: np.ndarray, moves: int) -> Track:
        return cls(
            prompt=prompt,
            tokens=[prompt_tokens],
            punctuation=[],
            length=len(prompt_tokens),
            pointer=prompt - 1,
            counts=np.ones(moves, np.int64),
        )

    @property
    def text_tokens(self) -> int:
        return self.length - self.prompt

    def all_tokens(self) -> np.ndarray:
        return np.concatenate(self.tokens)

    def needs_text(self, rules: PointerRules) -> bool:
        return not self.ended and self.phone_count - self.pointer < rules.min_look_ahead

    def add(self, ids: np.ndarray, punctuation: np.ndarray, room: int, end: list[int]) -> bool:
        """Append a piece's tokens (``punctuation``: its punctuation tokens' positions in
        it); at most ``room`` tokens in all (then the text ends: ``end`` is appended, and
        True returned)."""
        left = room - self.length
        cut = len(ids) > left
        if cut:
            ids = ids[:left]
            punctuation = punctuation[punctuation < left]
        self.punctuation.extend((punctuation + self.length).tolist())
        self.tokens.append(np.asarray(ids, np.int64))
        self.length += len(ids)
        self.phone_count = self.length - len(self.punctuation)
        if cut:
            self.cut = True
            self.finish(end)
        return cut

    def add_word(self, index: int, first: int) -> None:
        """The word ``index`` holds the phones from ``first`` to the current count."""
        if index >= 0:
            self.words.append((index, first, self.phone_count))

    def reached(self, frame: int, last: int | None = None) -> list[tuple[int, int, int]]:
        """Words the pointer has reached, now that its next frame (audio frame
        ``frame`` of the context) reads :attr:`pair`: ``(index, start, end)`` in audio
        frames. A word starts where the pointer first reads one of its phones; its end
        is estimated from its phones at the pace the context has spoken so far.
        ``last``: the context's audio ends after that frame (nothing starts later)."""
        out = []
        spoken = max(1, self.pointer - (self.prompt - 1))
        per_phone = max(0.5, frame / spoken)
        while self.words and self.pair[1] >= self.words[0][1]:
            index, first, end = self.words.popleft()
            start = frame if last is None else min(frame, last)
            stop = start + max(1, round((end - first) * per_phone))
            out.append((index, start, stop if last is None else min(stop, last + 1)))
        return out

    def finish(self, end: list[int]) -> None:
        """The text is complete: silence and the end token go in."""
        self.tokens.append(np.asarray(end, np.int64))
        self.length += len(end)
        self.phone_count = self.length - len(self.punctuation) - len(end)
        self.ended = True

    def move(self, move: int, step: int, rules: PointerRules) -> None:
        """Apply frame ``step``'s move (the reference's ``update_indices_and_tokens``)."""
        shift, count = rules.moves[move]
        start = self.pointer + shift
        state = (start, start + count)
        seen = self.seen.get(state)
        if seen is not None and (
            (start >= self.phone_count - 2 and seen == 3) or seen > rules.repeat_limit
        ):
            start += 1
            state = (start, start + count)
        if start >= self.phone_count:
            index = min(start, self.phone_count + 1)
            pair = (index, index)
            self.eos_step = step
        else:
            pair = (start, start + count - 1)
        self.pointer = pair[1]
        self.pair = pair
        self.seen[state] = self.seen.get(state, 0) + 1

    def count_move(self, move: int, rules: PointerRules) -> None:
        """The speaking-rate counts after a frame's move (a window of recent frames)."""
        self.counts[move] += 1
        self.history.append(move)
        if len(self.history) > rules.rate_window:
            self.counts[self.history.popleft()] -= 1
