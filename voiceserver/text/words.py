"""Word-at-a-time release of streamed text, for models that read text while speaking.

Such a model needs no sentence to start; it only must not see half a word
(a tokenizer would split "Hel" + "lo" differently from "Hello"). Text is
released up to the last whitespace; the partial word waits for the next piece.
"""

from __future__ import annotations


class WordStreamer:
    def __init__(self) -> None:
        self._buffer = ""

    def push(self, text: str) -> str:
        self._buffer += text
        cut = max(self._buffer.rfind(" "), self._buffer.rfind("\n"), self._buffer.rfind("\t"))
        if cut < 0:
            return ""
        ready, self._buffer = self._buffer[: cut + 1], self._buffer[cut + 1 :]
        return ready

    def flush(self) -> str:
        ready, self._buffer = self._buffer, ""
        return ready
