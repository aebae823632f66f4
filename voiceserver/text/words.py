"""Word-at-a-time release of streamed text, for models that read text while speaking.

Such a model needs no sentence to start; it only must not see half a word
(a tokenizer would split "Hel" + "lo" differently from "Hello"). Text is
released up to the whitespace before the last, possibly unfinished, word, and
that whitespace stays with the word: BPE tokenizers attach a leading space to
a word (" there"), so released pieces tokenize as the whole text would.

A "word" is bounded: a run without whitespace longer than ``max_chars`` (CJK
text, or garbage) is released in pieces of at most that many characters, cut
after a punctuation mark where there is one, so no single tokenizer call on
the engine thread gets an unbounded word. Pushing is linear in the text
pushed: only the new text is searched for a word boundary, so such a run
streamed one character at a time is not rescanned on every push.
"""

from __future__ import annotations

import re

from voiceserver.text.segmenter import may_end_sentence

DEFAULT_MAX_CHARS = 400
_PUNCTUATION = re.compile(r"[.,;:!?。，、；：！？…」』）)]")


class WordStreamer:
    def __init__(
        self,
        max_chars: int = DEFAULT_MAX_CHARS,
        max_delay_ms: int | None = None,
        end_delay_ms: int | None = None,
    ) -> None:
        """``max_delay_ms``: a held word is released once it has waited this long (it may
        be unfinished: nothing came for that long); ``end_delay_ms``: a held word that
        ends in a sentence mark (``today?``) once nothing has arrived for this long. None:
        no timer (the word waits for whitespace or ``flush``)."""
        if max_chars < 1:
            raise ValueError("max_chars must be >= 1")
        self.max_chars = max_chars
        self.max_delay_ms = max_delay_ms
        self.end_delay_ms = end_delay_ms
        self._pieces: list[str] = []
        """Held text: at most whitespace, then one (possibly unfinished) word."""
        self._held = 0
        """Characters held."""
        self._word_since: float | None = None
        """When the held word began to arrive (None: no word held)."""
        self._last_push = 0.0

    def push(self, text: str, now: float = 0.0) -> list[str]:
        """The pieces of text ready now (possibly none); ``now`` (monotonic seconds)
        matters only with a timer."""
        if not text:
            return []
        self._last_push = now
        self._pieces.append(text)
        self._held += len(text)
        if not any(ch.isspace() for ch in text):
            # No boundary in the new text: the held word just grows, until it is too long.
            if self._word_since is None:
                self._word_since = now
            return self._release_long_word()
        buffer = "".join(self._pieces)
        cut = len(buffer)
        if not buffer[-1].isspace():
            # The last word may still be arriving: keep it.
            while not buffer[cut - 1].isspace():
                cut -= 1
        # Whitespace travels with the word after it.
        while cut > 0 and buffer[cut - 1].isspace():
            cut -= 1
        self._pieces = [buffer[cut:]] if cut < len(buffer) else []
        self._held = len(buffer) - cut
        self._word_since = now if not buffer[-1].isspace() else None
        return self._bounded(buffer[:cut]) + self._release_long_word()

    def flush(self) -> list[str]:
        """Everything held, in bounded pieces."""
        ready = "".join(self._pieces)
        self._pieces, self._held, self._word_since = [], 0, None
        return self._bounded(ready)

    def deadline(self) -> float | None:
        """When :meth:`poll` should next be called; None when no timer is needed."""
        if self._word_since is None:
            return None
        due = None
        if self.max_delay_ms is not None:
            due = self._word_since + self.max_delay_ms / 1000.0
        if self.end_delay_ms is not None and may_end_sentence("".join(self._pieces)):
            end = self._last_push + self.end_delay_ms / 1000.0
            due = end if due is None else min(due, end)
        return due

    def poll(self, now: float) -> list[str]:
        """The held word, once its deadline has passed."""
        due = self.deadline()
        return self.flush() if due is not None and now >= due else []

    def _release_long_word(self) -> list[str]:
        if self._held <= self.max_chars:
            return []
        held = "".join(self._pieces)
        pieces = self._bounded(held)
        # The last piece may still grow: hold it back.
        self._pieces = [pieces[-1]]
        self._held = len(pieces[-1])
        return pieces[:-1]

    def _bounded(self, text: str) -> list[str]:
        """``text`` cut so that no run without whitespace exceeds ``max_chars``."""
        if not text:
            return []
        out: list[str] = []
        start = 0
        for run in re.finditer(rf"\S{{{self.max_chars + 1},}}", text):
            pos = run.start()
            while run.end() - pos > self.max_chars:
                window = text[pos : pos + self.max_chars]
                marks = [m.end() for m in _PUNCTUATION.finditer(window)]
                cut = pos + (
                    marks[-1] if marks and marks[-1] > self.max_chars // 2 else len(window)
                )
                out.append(text[start:cut])
                start = pos = cut
        out.append(text[start:])
        return [piece for piece in out if piece]
