"""English text normalisation exactly as VoXtream2 was trained and runs (voxtream 0.2.5's
``english_normalizer``).

The pipeline, in order:

1. emoji presentation characters, variation selector 16 and zero-width joiners removed;
2. punctuation folded onto the model's alphabet (``. , ? ! ' -``): CJK and fullwidth marks
   to ASCII, ``…`` to dots, curly apostrophes to ``'``, dash variants to ``-``, primes,
   backslash and underscore to spaces; quotes, brackets and typographic symbols removed;
   then contextual rules: a dot run is a pause (", "), ``:`` between non-digits and ``;``
   are commas, a dash run or a dash not joining word characters is a spaced pause, ``!!!``
   and ``?!`` collapse, no space before ``. , ! ?``, stacked marks keep the first;
3. single capital initials lose their dot ("J. R. R." -> "J R R"), apostrophes outside a
   letter pair go, ``word.word`` (two letters or more each side) splits at the dot;
4. clock times in words (:mod:`models.voxtream.text.clock`); any colon left becomes ", ",
   a spaced dash becomes ", ";
5. numbers, money and decimals in words (:mod:`models.voxtream.text.numbers`);
6. abbreviations (mr, mrs, dr, st, ... ms -> "milliseconds"), case-insensitive;
7. capitals inside a mixed-case word lowered ("VoXtream2" -> "Voxtream2"; "NASA" stays);
8. ``& % + = $ / @`` as words; whitespace collapsed. Case is kept otherwise.
"""

from __future__ import annotations

import re

import regex

from models.voxtream.text.clock import expand_times
from models.voxtream.text.numbers import expand_numbers

_EMOJI = regex.compile(r"\p{Emoji_Presentation}")
_EMOJI_JOINERS = regex.compile("[\ufe0f\u200d]")

_FOLDS = str.maketrans(
    {
        "。": ".",
        "？": "?",
        "！": "!",
        "、": ",",
        "，": ",",
        "،": ",",
        "：": ":",
        "；": ";",
        "…": "...",
        "‥": "..",
        "‘": "'",
        "’": "'",
        "‚": "'",
        "‛": "'",
        "—": "-",
        "–": "-",
        "―": "-",
        "‒": "-",
        "‑": "-",
        "−": "-",
        "־": "-",
        "′": " ",
        "″": " ",
        "\\": " ",
        "_": " ",
        "ー": None,
    }
)
"""One-character folds (a single pass, so their order does not matter)."""

_SILENT = re.compile(r"[\"“”„«»《》⟨⟩()\[\]{}<>*#•†‡‖§·・`¡¿|~]")

_PAUSE_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\.\.+"), ", "),
    (re.compile(r"(?<!\d):(?!\d)"), ","),
    (re.compile(r";"), ","),
    (re.compile(r"\s*--+\s*"), " - "),
    (re.compile(r"(?<!\w)-|-(?!\w)"), " - "),
    (re.compile(r"([!?])[!?]+"), r"\1"),
    (re.compile(r"\s+([.,!?])"), r"\1"),
    (re.compile(r"([.,!?])(?:\s*[.,])+"), r"\1"),
)
"""Contextual punctuation rules, applied in this order."""

_INITIAL = re.compile(r"(?:(?<=\s)|^)([A-Z])\.\s*")
_LONE_APOSTROPHE = re.compile(r"(?<![A-Za-z])'|'(?![A-Za-z])")
_DOTTED_WORDS = re.compile(r"([A-Za-z]{2,})\.([A-Za-z]{2,})")

_ABBREVIATIONS = (
    ("mrs", "misess"),
    ("mr", "mister"),
    ("dr", "doctor"),
    ("st", "saint"),
    ("jr", "junior"),
    ("maj", "major"),
    ("gen", "general"),
    ("drs", "doctors"),
    ("rev", "reverend"),
    ("lt", "lieutenant"),
    ("hon", "honorable"),
    ("sgt", "sergeant"),
    ("capt", "captain"),
    ("esq", "esquire"),
    ("ltd", "limited"),
    ("col", "colonel"),
    ("ft", "fort"),
    ("i.e", "that is"),
    ("e.g", "for example"),
    ("hrs", "hours"),
    ("mins", "minutes"),
    ("ms", "milliseconds"),
)
"""(written form without its final dot, spoken form), tried in this order."""

_ABBREVIATION_RULES = tuple(
    (re.compile(rf"\b{re.escape(short)}\.?(?=\W|$)", re.IGNORECASE), spoken)
    for short, spoken in _ABBREVIATIONS
)

_ASCII_WORD = re.compile(r"\b[A-Za-z][A-Za-z0-9]*\b")

_SYMBOLS = (
    ("&", " and "),
    ("%", " percent "),
    ("+", " plus "),
    ("=", " equals "),
    ("$", " dollar "),
    ("/", " slash "),
    ("@", " at "),
)

_SPACES = re.compile(r"\s+")


def _drop_emoji(text: str) -> str:
    return _EMOJI_JOINERS.sub("", _EMOJI.sub("", text))


def _fold_punctuation(text: str) -> str:
    text = _SILENT.sub("", text.translate(_FOLDS))
    for pattern, replacement in _PAUSE_RULES:
        text = pattern.sub(replacement, text)
    text = _INITIAL.sub(r"\1 ", text)
    text = _LONE_APOSTROPHE.sub("", text)
    return _DOTTED_WORDS.sub(r"\1 \2", text)


def _lower_inner_capitals(match: re.Match[str]) -> str:
    word = match.group(0)
    if len(word) <= 1 or word.isupper():
        return word
    return word[0] + word[1:].lower()


def normalize(text: str) -> str:
    """``text`` as the model reads it (see the module doc); may be empty."""
    text = _fold_punctuation(_drop_emoji(text))
    text = expand_times(text)
    text = text.replace(":", ", ").replace(" - ", ", ")
    text = expand_numbers(text)
    for pattern, spoken in _ABBREVIATION_RULES:
        text = pattern.sub(spoken, text)
    text = _ASCII_WORD.sub(_lower_inner_capitals, text)
    for symbol, spoken in _SYMBOLS:
        text = text.replace(symbol, spoken)
    return _SPACES.sub(" ", text).strip()
