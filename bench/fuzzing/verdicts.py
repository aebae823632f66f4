"""Verdicts: what the server may answer to one message (error codes, closes)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Echo = Literal["required", "optional"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the server may answer to one message.

    ``codes``: error codes that fit. ``must``: an error is owed (or a close in
    ``closes``). ``echo``: ``required`` when the server can read the message's
    ``event_id``, so its error must echo it. ``closes``: close codes the message
    may cause.
    """

    codes: frozenset[str] = frozenset()
    must: bool = False
    echo: Echo = "required"
    closes: frozenset[int] = frozenset()

    def __or__(self, other: Verdict) -> Verdict:
        echo: Echo = "optional" if "optional" in (self.echo, other.echo) else "required"
        return Verdict(
            self.codes | other.codes, self.must or other.must, echo, self.closes | other.closes
        )


OK = Verdict()


def bad(*codes: str, echo: Echo = "required", closes: Iterable[int] = ()) -> Verdict:
    return Verdict(frozenset(codes), True, echo, frozenset(closes))


def maybe(*codes: str, echo: Echo = "required", closes: Iterable[int] = ()) -> Verdict:
    return Verdict(frozenset(codes), False, echo, frozenset(closes))


UNPARSABLE = bad("invalid_json", echo="optional")
SURROGATE = maybe("invalid_json", "invalid_field", echo="optional")
"""Lone surrogates are not UTF-8 text: rejecting the message fits, so does accepting it."""
BEYOND_INT64 = maybe("invalid_field")
"""An unbounded integer field past int64: refusing it fits, so does taking it."""
MODEL_REFUSALS = ("invalid_field", "unsupported_value")
"""What a model may answer to a value the protocol allows but the model cannot use."""
