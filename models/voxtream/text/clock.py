"""Clock times -> words, as VoXtream2's normaliser reads them (voxtream 0.2.5).

``H:MM`` with an hour 0..23 and minutes 00..59, optionally followed by ``am``/``pm`` (any
case), becomes "<hour> [oh] <minutes> <a m|p m>": ``3:30pm`` -> "three thirty p m",
``14:05`` -> "two oh five p m", ``0:00`` -> "twelve p m" (the reference calls midnight
"p m"), ``9:00 AM`` -> "nine A M" (a written suffix is spelt as written). Dotted suffixes
(``a.m.``) are not recognised: the time is read with its default suffix and the letters
stay.
"""

from __future__ import annotations

import re

from models.voxtream.text.numbers import say_number

# The trailing \s* is inside the match even when no suffix follows ("3:30 x" -> the space
# is consumed), as in the reference.
_TIME = re.compile(
    r"\b(0?[0-9]|1[0-9]|2[0-3]):([0-5][0-9])\s*(am|pm)?\b",
    re.IGNORECASE,
)


def _spoken(match: re.Match[str]) -> str:
    hour = int(match.group(1))
    afternoon = hour >= 12
    if hour > 12:
        hour -= 12
    elif hour == 0:
        hour, afternoon = 12, True
    words = [say_number(hour)]
    minute = int(match.group(2))
    if minute:
        if minute < 10:
            words.append("oh")
        words.append(say_number(minute))
    suffix = match.group(3)
    if suffix is None:
        words.append("p m" if afternoon else "a m")
    else:
        words.extend(suffix)
    return " ".join(words)


def expand_times(text: str) -> str:
    """Every clock time of ``text`` in words."""
    return _TIME.sub(_spoken, text)
