"""Text -> IPA string, as VoXtream2's ``ESpeak`` phonemizer gives it (voxtream 0.2.5,
Coqui-TTS lineage).

The text is stripped and cut at its punctuation runs (any of ``;:,.!?¡¿—…"«»“”`` with the
whitespace around them); each piece between runs is phonemised alone by espeak-ng and
the runs are put back verbatim between the phonemised pieces. A piece's output lines
(one per clause) are stripped, rid of language-switch markers such as ``(en)``, and
joined with nothing between them; ``_`` (espeak's phoneme separator) becomes ``|``.
Words are separated by spaces: ``"Hello, world."`` -> ``"h|ə|l|ˈoʊ, w|ˈɜː|l|d."``.

Kept from the reference because the model was trained on it:

- a text that starts with its only punctuation run loses the rest (``", hello"`` ->
  ``", "``): the reference drops the piece after a leading run when no other run
  follows;
- clause lines are joined without a space, so two words can fuse (``"Mr. Smith"``
  unnormalised -> ``"m|ˈɪ|s|t|ɚs|m|ˈɪ|θ"``).

Each espeak-ng call is cached (least recently used, 8192 pieces by default, as the
reference). Thread-safe.
"""

from __future__ import annotations

import enum
import functools
import re

from models.voxtream.text.espeak import check_available, espeak_ipa

PUNCTUATION = ';:,.!?¡¿—…"«»“”'
"""Characters the phonemizer cuts at and puts back."""

SEPARATOR = "|"
CACHE_SIZE = 8192

_RUN = re.compile(rf"(\s*[{re.escape(PUNCTUATION)}]+\s*)+")
_LANGUAGE_MARK = re.compile(r"\(.+?\)")


class _Where(enum.Enum):
    BEGIN = 0
    END = 1
    MIDDLE = 2


def _cut(text: str) -> tuple[list[str], list[tuple[str, _Where]]]:
    """The pieces to phonemise and the punctuation runs, with where each run sits."""
    runs = [m.group() for m in _RUN.finditer(text)]
    if not runs:
        return [text], []
    if len(runs) == 1 and runs[0] == text:
        return [], [(text, _Where.BEGIN)]
    marks: list[tuple[str, _Where]] = []
    for i, run in enumerate(runs):
        if i == 0 and text.startswith(run):
            marks.append((run, _Where.BEGIN))
        elif i == len(runs) - 1 and text.endswith(run):
            marks.append((run, _Where.END))
        else:
            marks.append((run, _Where.MIDDLE))
    pieces: list[str] = []
    rest = text
    for i, (run, _) in enumerate(marks):
        before, _, rest = rest.partition(run)
        if not before:
            continue  # (with a lone leading run, what follows it is dropped too)
        pieces.append(before)
        if i == len(marks) - 1 and rest:
            pieces.append(rest)
    return pieces, marks


def _paste(phonemized: list[str], marks: list[tuple[str, _Where]]) -> str:
    """The phonemised pieces with the runs put back (the reference's first result item)."""
    items = list(phonemized)
    for k, (run, where) in enumerate(marks):
        if not items:
            return "".join(r for r, _ in marks[k:])
        if where is _Where.BEGIN:
            items[0] = run + items[0]
        elif where is _Where.END:
            return items[0] + run
        elif len(items) == 1:
            items[0] += run
        else:
            items[0:2] = [items[0] + run + items[1]]
    return items[0]


def _clean(raw: bytes) -> str:
    out = []
    for line in raw.split(b"\n"):
        out.append(_LANGUAGE_MARK.sub("", line.decode("utf-8").strip()).strip())
    return "".join(out).replace("_", SEPARATOR)


class Phonemizer:
    """``phonemize(text)`` -> IPA with ``|`` between phones and spaces between words."""

    def __init__(self, cache_size: int = CACHE_SIZE, *, command: bool = False) -> None:
        """``command``: run the ``espeak-ng`` command per piece, as the reference does
        (slow; for comparisons), instead of the library."""
        check_available()
        self._command = command
        self._piece = functools.lru_cache(maxsize=max(0, cache_size))(self._uncached)

    def _uncached(self, piece: str) -> str:
        return _clean(espeak_ipa(piece, command=self._command))

    def phonemize(self, text: str) -> str:
        pieces, marks = _cut(text.strip())
        return _paste([self._piece(p) for p in pieces], marks)
