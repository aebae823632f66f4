"""What a step sends, as data: JSON trees with placeholders (the probe's own event id,
step-private context ids, verbatim tokens), frame bodies, and the steps themselves.

:mod:`bench.fuzzing.render` turns them into frames when they are sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.fuzzing.verdicts import OK, Verdict


@dataclass(frozen=True, slots=True)
class Raw:
    """JSON text inserted verbatim: tokens json.dumps cannot write (NaN, 1e309, 01)."""

    text: str


@dataclass(frozen=True, slots=True)
class EventId:
    """The probe's own ``event_id`` ("f-<n>"), optionally with ``~tail`` and ``pad`` x's."""

    pad: int = 0
    tail: str = ""


@dataclass(frozen=True, slots=True)
class Cid:
    """A context id private to its step: "<step prefix><name><tail>", padded with x's
    to ``length`` characters when that is set."""

    name: str = "a"
    length: int = 0
    tail: str = ""


@dataclass(frozen=True, slots=True)
class Pairs:
    """A JSON object written from pairs, so keys may repeat."""

    items: tuple[tuple[str, Any], ...]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""A field value that means: leave the field out."""


# --- frame bodies ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Json:
    node: Any


@dataclass(frozen=True, slots=True)
class Mangled:
    """A message's JSON, broken after rendering."""

    node: Any
    how: str
    arg: int = 0


@dataclass(frozen=True, slots=True)
class Sized:
    """``node`` with ``node[key]`` filled with ``unit`` so the frame is ``total`` bytes."""

    node: dict[str, Any]
    key: str
    total: int
    unit: str = "x"


@dataclass(frozen=True, slots=True)
class Deep:
    shape: str
    depth: int


@dataclass(frozen=True, slots=True)
class Binary:
    size: int
    kind: str = "noise"


@dataclass(frozen=True, slots=True)
class Verbatim:
    text: str


Body = Json | Mangled | Sized | Deep | Binary | Verbatim


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    body: Body
    label: str
    verdict: Verdict = OK


@dataclass(frozen=True, slots=True)
class Step:
    """Messages sent back to back; ``family`` names the generator (coverage, reports).

    ``fresh``: the vllm-omni socket only; sent on a new connection before any
    ``session.config``. ``settle``: wait until the step's contexts have ended before
    judging, so errors of the synthesis itself count for the step.
    """

    family: str
    probes: tuple[ProbeSpec, ...]
    fresh: bool = False
    settle: bool = False

    def __repr__(self) -> str:
        return f"Step({self.family}, {len(self.probes)} messages)"
