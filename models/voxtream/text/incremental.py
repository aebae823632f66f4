"""Streamed text deltas -> the pieces VoXtream2's reference streams, phonemised one by one.

The reference's streaming input (``text_generator``) hands the generator one word at a
time: the whitespace-separated runs of the text (``str.split()``), each phonemised alone
with the context trick of :meth:`VoxtreamText.encode_piece`. A client, though, sends
deltas that need not end at a word boundary: an LLM streams ``"Hel"``, ``"lo"``,
``" wor"``, ``"ld!"``. Phonemising ``"Hel"`` and then ``"lo"`` would say two wrong words
and never correct them (a piece is never phonemised again), so :class:`IncrementalText`
keeps the unfinished trailing run and releases a word only once whitespace follows it,
or at :meth:`IncrementalText.flush` (end of input). Punctuation does not end a word:
the reference's piece is ``"world!"``, mark included, and ``"3.50"``, ``"e.g."``,
``"Mr."`` must not be cut at their dots. So whatever the deltas, the pieces are exactly
``text_generator(whole_text)``'s and their tokens the reference's.

The cost: a word waits for the delta that starts the next word (or for the flush); for a
streaming LLM that is one token.

One instance per stream, used from one thread at a time; the :class:`VoxtreamText` it
calls may be shared.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.voxtream.text.frontend import TextTokens, VoxtreamText
from models.voxtream.text.spans import WordSpan


@dataclass(frozen=True)
class Piece:
    """One released word. ``text``: the word as sent; ``[char_start, char_end)``: where
    it sits in everything this stream was sent; ``phone_start``: how many phones
    (:attr:`PhoneTokens.ids`, punctuation excluded) the stream's earlier pieces made;
    ``encoded``: :meth:`VoxtreamText.encode_piece` of ``text``."""

    text: str
    char_start: int
    char_end: int
    phone_start: int
    encoded: TextTokens

    @property
    def phone_end(self) -> int:
        return self.phone_start + len(self.encoded.tokens.ids)

    @property
    def spans(self) -> tuple[WordSpan, ...]:
        """The piece's word spans in stream coordinates (phones and characters)."""
        return self.encoded.shifted(self.phone_start, self.char_start)


class IncrementalText:
    """Cuts a stream of text deltas into the reference's word pieces (see the module doc)."""

    def __init__(self, frontend: VoxtreamText) -> None:
        self._frontend = frontend
        self._word: list[str] = []  # the unfinished word's parts (never any whitespace)
        self._word_at = 0  # where it starts in the stream
        self._seen = 0  # characters received
        self._phones = 0

    @property
    def pending(self) -> str:
        """The unfinished word received and not yet released ("" if none)."""
        return "".join(self._word)

    @property
    def phones(self) -> int:
        """Phones released so far (punctuation excluded)."""
        return self._phones

    def push(self, delta: str) -> list[Piece]:
        """Add ``delta``; the words it finished, in order."""
        pieces: list[Piece] = []
        begin = 0  # start of the part of `delta` that belongs to the current word
        for i, ch in enumerate(delta):
            if ch.isspace():
                if self._word or i > begin:
                    self._word.append(delta[begin:i])
                    pieces.append(self._release())
                begin = i + 1
            elif not self._word and i == begin:
                self._word_at = self._seen + i
        if begin < len(delta):
            self._word.append(delta[begin:])
        self._seen += len(delta)
        return pieces

    def flush(self) -> list[Piece]:
        """End of input: the unfinished word, if any."""
        return [self._release()] if self._word else []

    def _release(self) -> Piece:
        word = "".join(self._word)
        self._word = []
        encoded = self._frontend.encode_piece(word)
        piece = Piece(word, self._word_at, self._word_at + len(word), self._phones, encoded)
        self._phones = piece.phone_end
        return piece
