"""Word-at-a-time release of streamed text, for models that read text while speaking.

Such a model needs no sentence to start; it only must not see half a word
(a tokenizer would split "Hel" + "lo" differently from "Hello"). Text is
released up to the whitespace before the last, possibly unfinished, word, and
that whitespace stays with the word: BPE tokenizers attach a leading space to
a word (" there"), so released pieces tokenize as the whole text would.
"""

from __future__ import annotations


class WordStreamer:
    def __init__(self) -> None:
        self._buffer = ""

    def push(self, text: str) -> str:
        self._buffer += text
        cut = len(self._buffer)
        if not self._buffer[-1:].isspace():
            # The last word may still be arriving: keep it.
            while cut > 0 and not self._buffer[cut - 1].isspace():
                cut -= 1
        # Whitespace travels with the word after it.
        while cut > 0 and self._buffer[cut - 1].isspace():
            cut -= 1
        ready, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return ready

    def flush(self) -> str:
        ready, self._buffer = self._buffer, ""
        return ready
