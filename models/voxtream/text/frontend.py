"""VoXtream2's text front end: text -> phone ids the way the reference prepares them.

Two modes, as the reference's ``text_to_phone_tokens`` has them:

- :meth:`VoxtreamText.encode` (whole text): normalise, phonemise, tokenise; plus the
  word spans of ``build_text_progress_metadata``, tied to the input's characters.
- :meth:`VoxtreamText.encode_piece` (``full_streaming=True``): one streamed piece,
  normalised alone, phonemised with ``" context"`` appended and the phonemes' last 18
  characters (``" k|ˈɑː|n|t|ɛ|k|s|t"``) cut off, so the piece is never read as the end of
  a sentence and is never phonemised again when later pieces arrive. The reference
  streams one word (a whitespace-separated run of the text) per piece;
  :class:`models.voxtream.text.incremental.IncrementalText` cuts a stream of text deltas
  into exactly those pieces.

Thread-safe: one instance serves every session (espeak-ng calls are serialised and
cached; see :mod:`models.voxtream.text.espeak`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from models.voxtream.text.normalize import normalize
from models.voxtream.text.phonemize import CACHE_SIZE, Phonemizer
from models.voxtream.text.spans import WordSpan, owners, phone_spans
from models.voxtream.text.tokens import PhoneTable, PhoneTokens, phone_tokens

TEXT_CONTEXT = " context"
"""``text_context`` of the reference's generator.json: phonemised after every piece."""
TEXT_CONTEXT_LENGTH = 18
"""``text_context_length``: how many characters of phonemes are cut off a piece."""

_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class TextTokens:
    """A text as the model reads it. ``text``: as given; ``normalized``: after the
    normaliser (the text itself with ``normalize=False``); ``phonemes``: espeak-ng's IPA
    (``|`` between phones, spaces between words; for a piece, with the context cut off);
    ``tokens``: the ids; ``spans``: one per phonemised word (see
    :mod:`models.voxtream.text.spans`), chars relative to ``text``."""

    text: str
    normalized: str
    phonemes: str
    tokens: PhoneTokens
    spans: tuple[WordSpan, ...]

    def shifted(self, phones: int, chars: int) -> tuple[WordSpan, ...]:
        """:attr:`spans` with ``phones`` added to the phone positions and ``chars`` to
        the known character positions (a piece's spans in its stream)."""
        return tuple(
            replace(
                s,
                start=s.start + phones,
                end=s.end + phones,
                char_start=s.char_start + chars if s.char_start >= 0 else -1,
                char_end=s.char_end + chars if s.char_end >= 0 else -1,
            )
            for s in self.spans
        )


class VoxtreamText:
    """Normaliser + espeak-ng + the checkpoint's phone table.

    ``phone_table``: ``phoneme_to_token.json`` (phone -> id; must hold ``unk`` and
    ``. , ? !``). ``context``/``context_length``: the generator config's ``text_context``
    and ``text_context_length``. ``command``: phonemise through the ``espeak-ng``
    command, as the reference does (slow; for comparisons)."""

    def __init__(
        self,
        phone_table: Mapping[str, int],
        *,
        context: str = TEXT_CONTEXT,
        context_length: int = TEXT_CONTEXT_LENGTH,
        cache_size: int = CACHE_SIZE,
        command: bool = False,
    ) -> None:
        if context_length < 1:  # the reference's phonemes[:-0] would be empty
            raise ValueError(f"text_context_length must be >= 1, got {context_length}")
        self.table = PhoneTable(phone_table)
        self.context = context
        self.context_length = context_length
        self._phonemizer = Phonemizer(cache_size, command=command)

    def normalize(self, text: str) -> str:
        return normalize(text)

    def phonemize(self, text: str) -> str:
        return self._phonemizer.phonemize(text)

    def encode(
        self, text: str, *, normalize: bool = True, max_phones: int | None = None
    ) -> TextTokens:
        """The whole ``text`` at once (``text_to_phone_tokens(text, normalize)``).
        ``max_phones``: the spans stop there, as the reference's metadata does with
        ``max_phone_tokens`` (the ids are never cut here)."""
        normalized = self.normalize(text) if normalize else text
        phonemes = self.phonemize(normalized)
        return self._tokens(text, normalized, phonemes, normalize, max_phones)

    def encode_piece(self, piece: str, *, normalize: bool = True) -> TextTokens:
        """One streamed piece (``text_to_phone_tokens(piece, full_streaming=True)``)."""
        normalized = self.normalize(piece) if normalize else piece
        phonemes = self.phonemize(normalized + self.context)[: -self.context_length]
        return self._tokens(piece, normalized, phonemes, normalize, None)

    def _tokens(
        self,
        text: str,
        normalized: str,
        phonemes: str,
        normalized_here: bool,
        max_phones: int | None,
    ) -> TextTokens:
        tokens = phone_tokens(phonemes, self.table)
        raw = phone_spans(normalized, phonemes, max_phones)
        inputs = [(m.start(), m.end()) for m in _WORD.finditer(text)]
        labels = normalized.split()
        phonemized = phonemes.split()
        words = len(phonemized)
        if len(inputs) == 1:
            word_owner, label_owner = [0] * words, [0] * len(labels)
        else:
            alone = [
                (self.normalize(text[a:b]) if normalized_here else text[a:b]).split()
                for a, b in inputs
            ]
            word_owner, label_owner = owners(alone, labels, phonemized, self._words_of)
        spans = []
        for index, (label, start, end) in enumerate(raw):
            # past the phonemised words, the reference adds the leftover labels
            who = word_owner[index] if index < words else label_owner[index]
            chars = inputs[who] if who >= 0 else (-1, -1)
            spans.append(WordSpan(label, start, end, *chars))
        return TextTokens(text, normalized, phonemes, tokens, tuple(spans))

    def _words_of(self, label: str) -> int:
        return len(self.phonemize(label).split())
