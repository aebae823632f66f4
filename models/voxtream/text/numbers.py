"""Digits -> English words, as VoXtream2's normaliser reads them (voxtream 0.2.5).

The passes run in a fixed order over the whole text, each a regular expression:

1. a space between a digit and a following ASCII letter (``3rd`` -> ``3 rd``, ``5pm`` ->
   ``5 pm``);
2. thousands commas dropped inside digit runs (``1,000`` -> ``1000``);
3. currency (``$``, ``£``, ``¥`` before an amount) -> ``<int> <unit> <cents> <subunit>``,
   the digits left for pass 6;
4. decimals ``a.b`` -> ``a point b``;
5. ordinals (``3rd``) -> words; pass 1 has always separated digits from letters, so this
   pass never fires: the model was trained on "three rd" and "one st" (-> "one saint" by
   the abbreviation pass), and that is what is kept;
6. every remaining (optionally negative) digit run -> words via ``inflect``; 1001..2999 are
   read as years ("nineteen ninety", "two thousand five", "nineteen hundred").

``inflect``'s engine keeps per-call settings on the instance, so calls are serialised.
A number ``inflect`` cannot name (10**36 and up, where the reference fails) is read digit
by digit instead.
"""

from __future__ import annotations

import re
import threading

import inflect

_ENGINE = inflect.engine()
_ENGINE_LOCK = threading.Lock()

_DIGIT_THEN_LETTER = re.compile(r"(?<=\d)(?=[A-Za-z])")
_GROUPED = re.compile(r"([0-9][0-9,]+[0-9])")
_MONEY = re.compile(r"([£$¥])([0-9,.]*[0-9]+)")
_DECIMAL = re.compile(r"([0-9]+\.[0-9]+)")
_ORDINAL = re.compile(r"[0-9]+(?:st|nd|rd|th)")
_INTEGER = re.compile(r"-?[0-9]+")

_LARGEST_DIGITS = 36
"""``inflect`` 7.5 names numbers below 10**36 (36 digits) only."""

_DIGIT_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

# Unit names by amount. An amount is looked up as a number (1 == 1.0; cents divided by
# 100), falling back to the plural of its kind: the reference's table and its quirks
# ("$0.100" reads "100 dollar": 100 / 100 == 1).
_UNITS: dict[str, dict[float, str]] = {
    "$": {0.01: "cent", 0.02: "cents", 1: "dollar", 2: "dollars"},
    "£": {0.01: "penny", 0.02: "pence", 1: "pound sterling", 2: "pounds sterling"},
    "¥": {0.02: "sen", 2: "yen"},
}


def say_number(value: int | str, **options: str | int) -> str:
    """``inflect``'s words for ``value`` (options as ``number_to_words`` takes them)."""
    with _ENGINE_LOCK:
        words = _ENGINE.number_to_words(value, **options)  # type: ignore[arg-type]
    assert isinstance(words, str)
    return words


def _integer_words(digits: str) -> str:
    if len(digits.lstrip("-").lstrip("0")) > _LARGEST_DIGITS:
        spoken = " ".join(_DIGIT_NAMES[int(d)] for d in digits.lstrip("-"))
        return f"minus {spoken}" if digits.startswith("-") else spoken
    number = int(digits)
    if not 1000 < number < 3000:
        return say_number(number, andword="")
    if number == 2000:
        return "two thousand"
    if 2000 < number < 2010:
        return "two thousand " + say_number(number % 100)
    if number % 100 == 0:
        return say_number(number // 100) + " hundred"
    return say_number(number, andword="", zero="oh", group=2).replace(", ", " ")


def _money_words(match: re.Match[str]) -> str:
    units = _UNITS[match.group(1)]
    amount = match.group(2)
    parts = amount.replace(",", "").split(".")
    if len(parts) > 2:
        return f"{amount} {units[2]}"
    spoken: list[str] = []
    whole = int(parts[0]) if parts[0] else 0
    if whole > 0:
        spoken.append(f"{whole} {units.get(whole, units[2])}")
    cents = int(parts[1]) if len(parts) > 1 and parts[1] else 0
    if cents > 0:
        spoken.append(f"{cents} {units.get(cents / 100, units[0.02])}")
    return " ".join(spoken) if spoken else f"zero {units[2]}"


def expand_numbers(text: str) -> str:
    """Every number of ``text`` in words (see the module doc for the passes)."""
    text = _DIGIT_THEN_LETTER.sub(" ", text)
    text = _GROUPED.sub(lambda m: m.group(1).replace(",", ""), text)
    text = _MONEY.sub(_money_words, text)
    text = _DECIMAL.sub(lambda m: m.group(1).replace(".", " point "), text)
    text = _ORDINAL.sub(lambda m: say_number(m.group(0)), text)
    return _INTEGER.sub(lambda m: _integer_words(m.group(0)), text)
