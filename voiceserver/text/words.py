"""Word-at-a-time release of streamed text, for models that read text while speaking.

Such a model needs no sentence to start; it only must not see half a word
(a tokenizer would split "Hel" + "lo" differently from "Hello"). Text is
released up to the whitespace before the last, possibly unfinished, word, and
that whitespace stays with the word: BPE tokenizers attach a leading space to
a word (" there"), so released pieces tokenize as the whole text would.

Pushing is linear in the text pushed: only the new text is searched for a
word boundary, so a long run without whitespace (CJK) streamed one character
at a time is not rescanned on every push.
"""

from __future__ import annotations


class WordStreamer:
    def __init__(self) -> None:
        self._pieces: list[str] = []
        """Held text: at most whitespace, then one (possibly unfinished) word."""

    def push(self, text: str) -> str:
        if not text:
            return ""
        if not any(ch.isspace() for ch in text):
            # No boundary in the new text: the held word just grows.
            self._pieces.append(text)
            return ""
        buffer = "".join(self._pieces) + text
        cut = len(buffer)
        if not buffer[-1].isspace():
            # The last word may still be arriving: keep it.
            while not buffer[cut - 1].isspace():
                cut -= 1
        # Whitespace travels with the word after it.
        while cut > 0 and buffer[cut - 1].isspace():
            cut -= 1
        self._pieces = [buffer[cut:]] if cut < len(buffer) else []
        return buffer[:cut]

    def flush(self) -> str:
        ready = "".join(self._pieces)
        self._pieces = []
        return ready
