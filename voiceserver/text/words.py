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

DEFAULT_MAX_CHARS = 400
_PUNCTUATION = re.compile(r"[.,;:!?。，、；：！？…」』）)]")


class WordStreamer:
    def __init__(self, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        if max_chars < 1:
            raise ValueError("max_chars must be >= 1")
        self.max_chars = max_chars
        self._pieces: list[str] = []
        """Held text: at most whitespace, then one (possibly unfinished) word."""
        self._held = 0
        """Characters held."""

    def push(self, text: str) -> list[str]:
        """The pieces of text ready now (possibly none)."""
        if not text:
            return []
        self._pieces.append(text)
        self._held += len(text)
        if not any(ch.isspace() for ch in text):
            # No boundary in the new text: the held word just grows, until it is too long.
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
        return self._bounded(buffer[:cut]) + self._release_long_word()

    def flush(self) -> list[str]:
        """Everything held, in bounded pieces."""
        ready = "".join(self._pieces)
        self._pieces, self._held = [], 0
        return self._bounded(ready)

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
