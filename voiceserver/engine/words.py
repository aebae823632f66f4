"""Word timing on the front end's side: engine word indices -> the client's text.

A context that asked for word timing keeps a :class:`WordTable`: every piece of
text it appends is split into words (runs of non-whitespace) whose character
offsets are taken over the context's whole text as the client sent it, so a
word stays where the client put it however the text was streamed in or cut
into segments. The runner reports word ``k`` of the context (``WordTimings``);
the table turns that into a :class:`TimedWord` with its text and offsets.

Times handed out never decrease: a word starts no earlier than the previous
one and ends no earlier than it starts, nor than the previous one ends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from voiceserver.engine.messages import WordTimings


@dataclass(frozen=True)
class TimedWord:
    """One word, in audio time relative to the context's first sample."""

    text: str
    start_s: float
    end_s: float
    char_start: int
    """Offset of the word's first character in the context's whole text."""
    char_end: int
    """Offset just past its last character."""

    @property
    def start_ms(self) -> int:
        return round(self.start_s * 1000)

    @property
    def end_ms(self) -> int:
        return round(self.end_s * 1000)


@dataclass(frozen=True)
class TimedWords:
    """Words of a context whose timing is now known, in order; delivered to the
    context's callback before the audio chunk holding their first sample."""

    cid: int
    words: tuple[TimedWord, ...]


class WordTable:
    """The words a context sent so far, indexed as the runner counts them.

    ``add`` runs where the text is encoded (a worker thread, in the order the
    text arrived), ``timed`` on the event loop; the engine reports a word only
    after its text was added, so the loop never reads an entry being written.
    """

    def __init__(self) -> None:
        self._texts: list[str] = []
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._next = 0
        """Index of the next word to hand out (earlier ones were sent or skipped)."""
        self._start_s = 0.0
        self._end_s = 0.0

    def __len__(self) -> int:
        return len(self._texts)

    def add(self, text: str, offset: int, spans: np.ndarray) -> int:
        """Record the words of a piece of text (``spans`` within ``text``, which starts
        at ``offset`` in the context's text); returns the index of its first word."""
        first = len(self._texts)
        for start, end in spans.tolist():
            self._texts.append(text[start:end])
            self._starts.append(offset + start)
            self._ends.append(offset + end)
        return first

    def timed(self, event: WordTimings) -> TimedWords | None:
        """The event's words, in order, with non-decreasing times; words reported
        again or out of order are dropped."""
        out: list[TimedWord] = []
        known = len(self._texts)
        for index, start, end in zip(
            event.index.tolist(), event.start_s.tolist(), event.end_s.tolist(), strict=True
        ):
            if index < self._next or index >= known:
                continue
            self._next = index + 1
            start = max(float(start), self._start_s)
            end = max(float(end), start, self._end_s)
            self._start_s, self._end_s = start, end
            out.append(
                TimedWord(self._texts[index], start, end, self._starts[index], self._ends[index])
            )
        return TimedWords(event.cid, tuple(out)) if out else None


def renumbered(table: np.ndarray, first: int) -> np.ndarray:
    """A unit's ``(word, first id, end id)`` rows with words counted over the context."""
    out = np.array(table, np.int64).reshape(-1, 3)
    out[:, 0] += first
    return out
