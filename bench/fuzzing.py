"""One protocol fuzzer for both WebSocket endpoints, over real sockets.

Used by ``tests/e2e/test_protocol_fuzz.py`` (CI-sized, derandomized) and by
``python -m bench.fuzz`` (10,000+ messages, seeded).

Hypothesis draws a plan: for each fuzz session a script of *steps*. A step is a
few messages sent back to back: one message with one field mutated (plus the
messages that give it something to act on, and a cleanup), a hostile but valid
sequence (bursts of create -> append -> cancel, too many contexts, ...), or raw
garbage (malformed JSON, binary frames, 100,000-deep nesting, oversized frames).
Every message carries a :class:`Verdict`: the error codes that fit it, whether
an error is owed (the generator knows it is invalid), and the close codes it may
cause. The generator decides that from the protocol's documented rules, never by
asking the server's own code.

The driver plays the scripts concurrently, with a well-behaved *bystander*
session alongside, and checks:

1. the server never dies: ``/health`` answers and fresh sessions work after;
2. every message known to be invalid gets an ``error`` that echoes its
   ``event_id`` (or, where the id cannot be read, one whose code fits), or the
   socket closes with a code the message explains; 1011 never fits; no error
   echoes an ``event_id`` over :data:`ECHO_MAX` or is over :data:`ERROR_FRAME_MAX`;
3. the bystander's audio is byte-identical to the same session on an idle server;
4. ordering: ``context.created`` comes before anything else about a context, a
   stream number is not reused before its context was seen to end, and ``seq``
   counts up; on the vllm-omni socket, audio only inside ``audio.start`` ..
   ``audio.done``;
5. a session with ``idle_timeout_s: 1e-9`` and an open context does not make the
   server spin (its CPU share, when the caller can read the server's CPU time).

Findings are replayed on fresh sessions and cut down to the smallest message
sequence that still shows them.

On ``/v1/audio/speech/ws`` every step is followed by a barrier, an empty
``session.update`` whose ``session.updated`` is queued after every answer to the
step, so answers are attributed to their step exactly. The vllm-omni socket
``/v1/audio/speech/stream`` has no ids; there ``input.done`` and its
``session.done`` are the barrier and errors are counted per step.

Each step cleans up after itself (cancels every context it may have opened,
restores session settings), so every step starts from a known state and its
verdicts do not depend on what ran before.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import itertools
import json
import math
import os
import struct
import time
import unicodedata
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import websockets
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

# --- what the generator knows about the protocol (PROTOCOL.md, protocol-extensions.md)

ECHO_MAX = 256
"""Longest ``event_id`` an error may echo back: a server must not amplify a client's
megabyte id into every answer (the cap protocol/messages.py gives ids)."""
TRANSPORT_FACTOR = 4
"""The server's WebSocket frame cap is this many times ``max_message_bytes``
(voiceserver.config.Limits.transport_max_bytes); above it frames are dropped unread."""
EMBEDDING_MAX = 8192
MAX_DELAY_MS_MAX = 600_000
IDLE_MIN_S = 0.1
INT64_MAX = 2**63 - 1

ENCODINGS = ("pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw", "opus")
PCM_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
ALL_RATES = tuple(sorted(set(PCM_RATES) | set(OPUS_RATES)))
CONTAINERS = ("raw", "ogg")
FRAME_MS = (10, 20, 40, 60)
BITRATE_RANGE = (6000, 510_000)
CONTEXT_ID_MAX = 128

CLOSE_NORMAL = 1000
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL = 1011
CLOSE_IDLE = 4008
CLOSE_ABNORMAL = 1006
PAST_TRANSPORT_CLOSES = (CLOSE_TOO_BIG, CLOSE_ABNORMAL)
"""A frame past the transport's cap is dropped while the client is still writing it;
the server's 1009 close frame can be lost to the TCP reset that follows (1006)."""

BARRIER_TIMEOUT_S = 60.0
SPIN_SETTLE_S = 1.5
SPIN_MARGIN = 0.3
"""CPU share (of one core) above an idle session's that counts as a busy loop."""
CONNECT_TIMEOUT_S = 10.0
BYSTANDER_TEXT = (
    "Every fuzz run needs a calm voice in the corner, reading the same words "
    "each time, while the others throw garbage at the server."
)


# --- verdicts --------------------------------------------------------------------

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


# --- message trees ---------------------------------------------------------------


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


@dataclass(frozen=True)
class Plan:
    native: tuple[tuple[Step, ...], ...]
    compat: tuple[tuple[Step, ...], ...]

    @property
    def messages(self) -> int:
        return sum(len(s.probes) for script in (*self.native, *self.compat) for s in script)

    def __repr__(self) -> str:
        return (
            f"Plan({len(self.native)} ws scripts, {len(self.compat)} stream scripts, "
            f"{self.messages} messages)"
        )


# --- rendering -------------------------------------------------------------------


def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)


def _dump_str(text: str) -> str:
    # ensure_ascii writes lone surrogates as \\udXXX escapes; raw, they are not UTF-8.
    return json.dumps(text, ensure_ascii=_has_surrogate(text))


@dataclass(frozen=True, slots=True)
class Rendered:
    spec: ProbeSpec
    frame: str | bytes
    event_id: str | None
    """The ``event_id`` written into the frame as a string, if any."""


class _Renderer:
    def __init__(self, event_id: str, prefix: str) -> None:
        self.base_id = event_id
        self.prefix = prefix
        self.used_id: str | None = None

    def event_id(self, node: EventId) -> str:
        text = self.base_id
        if node.pad or node.tail:
            text += "~" + node.tail + "x" * node.pad
        self.used_id = text
        return text

    def cid(self, node: Cid) -> str:
        text = self.prefix + node.name
        if node.length:
            text += "x" * max(0, node.length - len(text) - len(node.tail))
        return text + node.tail

    def json(self, node: Any) -> str:
        if isinstance(node, Raw):
            return node.text
        if isinstance(node, EventId):
            return _dump_str(self.event_id(node))
        if isinstance(node, Cid):
            return _dump_str(self.cid(node))
        if isinstance(node, str):
            return _dump_str(node)
        if isinstance(node, Pairs):
            items: Iterable[tuple[str, Any]] = node.items
        elif isinstance(node, dict):
            items = node.items()
        elif isinstance(node, list | tuple):
            return "[" + ",".join(self.json(v) for v in node) + "]"
        else:
            return json.dumps(node)
        parts = [f"{_dump_str(k)}:{self.json(v)}" for k, v in items if v is not MISSING]
        return "{" + ",".join(parts) + "}"

    def deep(self, shape: str, depth: int) -> str:
        arrays = "[" * depth + "]" * depth
        eid = _dump_str(self.event_id(EventId()))
        cid = _dump_str(self.cid(Cid()))
        if shape == "array":
            return arrays
        if shape == "object":
            return '{"a":' * depth + "1" + "}" * depth
        if shape == "mixed":
            return '[{"a":' * depth + "1" + "}]" * depth
        if shape == "unknown-field":
            return f'{{"type":"keepalive","event_id":{eid},"z":{arrays}}}'
        if shape == "text":
            return f'{{"type":"text.append","event_id":{eid},"context_id":{cid},"text":{arrays}}}'
        if shape == "embedding":
            return (
                f'{{"type":"context.create","event_id":{eid},"context_id":{cid},'
                f'"speaker_embedding":{arrays}}}'
            )
        if shape == "config-field":
            return f'{{"type":"session.config","z":{arrays}}}'
        if shape == "input-text":
            return f'{{"type":"input.text","text":{arrays}}}'
        raise ValueError(f"unknown deep shape {shape!r}")

    def render(self, spec: ProbeSpec) -> Rendered:
        body = spec.body
        frame: str | bytes
        if isinstance(body, Json):
            frame = self.json(body.node)
        elif isinstance(body, Mangled):
            frame = _mangle(self.json(body.node), body.how, body.arg)
        elif isinstance(body, Sized):
            empty = self.json({**body.node, body.key: ""})
            need = max(0, body.total - len(empty.encode()))
            unit_bytes = len(body.unit.encode())
            count = need // unit_bytes
            fill = body.unit * count + "x" * (need - count * unit_bytes)
            frame = self.json({**body.node, body.key: fill})
        elif isinstance(body, Deep):
            frame = self.deep(body.shape, body.depth)
        elif isinstance(body, Binary):
            frame = _binary(body.size, body.kind)
        else:
            frame = body.text
        return Rendered(spec, frame, self.used_id)


def _mangle(text: str, how: str, arg: int) -> str:
    if how == "truncate":
        return text[: max(1, min(len(text) - 1, len(text) * arg // 1000))]
    if how == "trail":
        return text + ["x", "}", "{}", " 1", ",", "\x00"][arg % 6]
    if how == "lead":
        return ["\ufeff", "x", "[", "//c\n", "/*c*/"][arg % 5] + text
    if how == "quotes":
        return text.replace('"', "'")
    if how == "comma":
        return text[:-1] + ",}"
    if how == "whitespace":
        return " \n\t\r" + text + "\r\n\t "
    raise ValueError(f"unknown mangling {how!r}")


def _binary(size: int, kind: str) -> bytes:
    if kind == "audio":
        header = struct.pack("<BBHI", 1, 2, 0, 0)
        return (header + bytes(max(0, size - len(header))))[: max(size, 0)]
    if kind == "zeros":
        return bytes(size)
    return bytes((i * 73 + 41) % 256 for i in range(size))


def show(frame: str | bytes, limit: int = 240) -> str:
    """A frame as a report shows it: short ones whole, long ones cut with their size."""
    if isinstance(frame, bytes):
        head = frame[:16].hex()
        return f"<binary frame, {len(frame)} bytes: {head}{'...' if len(frame) > 16 else ''}>"
    text = json.dumps(frame, ensure_ascii=True)[1:-1] if _needs_escape(frame) else frame
    if len(text) <= limit:
        return text
    return f"{text[: limit - 70]} ... {text[-50:]}  [{len(frame.encode('utf-8', 'surrogatepass'))} bytes]"


def _needs_escape(text: str) -> bool:
    return any(ord(ch) < 0x20 or 0xD800 <= ord(ch) <= 0xDFFF for ch in text)


# --- facts about the server under test ----------------------------------------------


@dataclass(frozen=True)
class ServerFacts:
    http: str
    model: str
    voices: tuple[str, ...]
    languages: tuple[str, ...]
    sample_rate: int
    max_contexts: int
    max_text_chars: int
    max_message_bytes: int
    idle_timeout_s: float

    @property
    def ws_url(self) -> str:
        return self.http.replace("http", "ws", 1) + "/v1/audio/speech/ws"

    @property
    def compat_url(self) -> str:
        return self.http.replace("http", "ws", 1) + "/v1/audio/speech/stream"

    @property
    def transport_max_bytes(self) -> int:
        return TRANSPORT_FACTOR * self.max_message_bytes

    @property
    def bystander_rate(self) -> int:
        # The model's own rate where PCM allows it: nothing is resampled.
        return self.sample_rate if self.sample_rate in PCM_RATES else 24000


def get_json(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


async def discover(http: str) -> ServerFacts:
    """Model, voices and session limits of a running server."""
    models = await asyncio.to_thread(get_json, f"{http}/v1/models")
    info = models["data"][0]
    url = http.replace("http", "ws", 1) + "/v1/audio/speech/ws"
    async with websockets.connect(url, max_size=None, compression=None) as ws:
        created = json.loads(await asyncio.wait_for(ws.recv(), CONNECT_TIMEOUT_S))
    limits = created["limits"]
    return ServerFacts(
        http=http,
        model=info["id"],
        voices=tuple(info["voices"]),
        languages=tuple(info["languages"]),
        sample_rate=int(info["sample_rate"]),
        max_contexts=int(limits["max_contexts"]),
        max_text_chars=int(limits["max_text_chars"]),
        max_message_bytes=int(limits["max_message_bytes"]),
        idle_timeout_s=float(limits["idle_timeout_s"]),
    )


# --- value catalogs ----------------------------------------------------------------

Variant = tuple[str, Any, Verdict]
"""(label, JSON value or MISSING, verdict of the message carrying it)."""

_NON_JSON_NUMBERS: tuple[tuple[str, str], ...] = (
    ("NaN", "NaN"),
    ("Infinity", "Infinity"),
    ("-Infinity", "-Infinity"),
    ("leading-zero", "01"),
    ("plus", "+1"),
    ("hex", "0x10"),
    ("dot", "1."),
)
_WRONG_TYPES: tuple[tuple[str, Any], ...] = (
    ("bool", True),
    ("false", False),
    ("string", "1"),
    ("empty-string", ""),
    ("list", [1]),
    ("object", {"v": 1}),
)


def _sample(variants: Sequence[Variant]) -> st.SearchStrategy[Variant]:
    return st.sampled_from(list(variants))


def _number(
    kind: Literal["int", "float"],
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
    beyond_int64: Verdict = BEYOND_INT64,
    judge: Callable[[float], Verdict] | None = None,
    nullable: bool = True,
) -> st.SearchStrategy[Variant]:
    """Boundary and hostile values for a number field; ``judge`` overrides the range rule."""

    def in_range(v: float) -> Verdict:
        if judge is not None:
            return judge(v)
        if lo is not None and (v < lo or (lo_open and v == lo)):
            return bad("invalid_field")
        if hi is not None and (v > hi or (hi_open and v == hi)):
            return bad("invalid_field")
        return OK

    def verdict(value: Any) -> Verdict:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return bad("invalid_field")
        if isinstance(value, float):
            if kind == "int":
                return bad("invalid_field")
            return in_range(value)
        if kind == "float":
            return in_range(float(value))
        result = in_range(value)
        if result.must or -(2**63) <= value <= INT64_MAX:
            return result
        return beyond_int64

    values: list[tuple[str, Any]] = [
        ("zero", 0),
        ("neg1", -1),
        ("one", 1),
        ("two", 2),
        ("int32+1", 2**31),
        ("int64-max", INT64_MAX),
        ("int64-max+1", 2**63),
        ("uint64+2", 2**64 + 1),
        ("huge-int", 10**40),
        ("int64-min-1", -(2**63) - 1),
        ("tiny", 1e-9),
        ("half", 0.5),
        ("one-and-half", 1.5),
        ("1e308", 1e308),
        ("-1e308", -1e308),
        ("neg-zero", -0.0),
    ]
    for bound, name in ((lo, "lo"), (hi, "hi")):
        if bound is None:
            continue
        if kind == "int":
            values += [
                (name, int(bound)),
                (f"{name}-1", int(bound) - 1),
                (f"{name}+1", int(bound) + 1),
            ]
        else:
            values += [
                (name, float(bound)),
                (f"{name}-ulp", math.nextafter(float(bound), -math.inf)),
                (f"{name}+ulp", math.nextafter(float(bound), math.inf)),
            ]
    variants: list[Variant] = [(label, v, verdict(v)) for label, v in values]
    variants += [(label, v, bad("invalid_field")) for label, v in _WRONG_TYPES]
    # The decoder may validate a valid prefix ("0" of "0x10") before it meets the rest.
    not_a_number = bad("invalid_json", "invalid_field", echo="optional")
    variants += [(label, Raw(text), not_a_number) for label, text in _NON_JSON_NUMBERS]
    variants += [
        ("1e309", Raw("1e309"), bad("invalid_field", "invalid_json", echo="optional")),
        ("-1e309", Raw("-1e309"), bad("invalid_field", "invalid_json", echo="optional")),
        ("exp-int", Raw("1E2"), verdict(100.0)),
        ("null", None, OK if nullable else bad("invalid_field")),
    ]
    return st.one_of(
        _sample(variants),
        st.integers(-(2**80), 2**80).map(lambda v: ("random-int", v, verdict(v))),
        st.floats(allow_nan=False, allow_infinity=False).map(
            lambda v: ("random-float", v, verdict(v))
        ),
    )


def _literal_int(allowed: Sequence[int]) -> st.SearchStrategy[Variant]:
    """Values for a field whose wire type is a set of ints (sample_rate, frame_ms); ints
    are left for the caller to judge (OK here), other types are refused."""
    wrong = bad("invalid_field", "unsupported_value")
    values: list[Variant] = [(f"v{v}", v, OK) for v in allowed]
    for label, v in (("zero", 0), ("neg1", -1), ("odd", 11025), ("near", allowed[-1] + 1)):
        values.append((label, v, OK))
    values += [
        ("int64-max+1", 2**63, wrong),
        ("huge-int", 10**30, wrong),
        ("float", float(allowed[0]), wrong),
        ("string", str(allowed[0]), wrong),
        ("bool", True, wrong),
        ("list", [allowed[0]], wrong),
        ("NaN", Raw("NaN"), UNPARSABLE),
        ("null", None, OK),
    ]
    return _sample(values)


def _enum(allowed: Sequence[str], *, nullable: bool = True) -> st.SearchStrategy[Variant]:
    first = allowed[0]
    unsupported = bad("unsupported_value")
    wrong = bad("invalid_field", "unsupported_value")
    values: list[Variant] = [(f"v-{v}", v, OK) for v in allowed]
    values += [
        ("empty", "", unsupported),
        ("unknown", "nope", unsupported),
        ("upper", first.upper(), unsupported),
        ("padded", f" {first} ", unsupported),
        ("nul", first + "\x00", bad("unsupported_value", "invalid_field")),
        ("rtl", "\u202e" + first, unsupported),
        (
            "surrogate",
            first + "\ud800",
            bad("unsupported_value", *SURROGATE.codes, echo="optional"),
        ),
        ("int", 5, wrong),
        ("bool", True, wrong),
        ("list", [first], wrong),
        ("object", {"v": first}, wrong),
        ("null", None, OK if nullable else bad("invalid_field")),
    ]
    return _sample(values)


@functools.cache
def _hostile_strings(message_bytes: int) -> list[tuple[str, str]]:
    long_chars = max(1000, message_bytes - 2048)
    return [
        ("empty", ""),
        ("plain", "plain words"),
        ("len257", "n" * 257),
        ("len10001", "i" * 10_001),
        ("long", ("lorem ipsum " * (long_chars // 12 + 1))[:long_chars]),
        ("nul", "before\x00after"),
        ("controls", "ctl\x01\x07\x08\x1b[2J\x7f\x85\x9f"),
        ("lone-high-surrogate", "a\ud800b"),
        ("lone-low-surrogate", "\udfff"),
        ("reversed-pair", "\udc00\ud800"),
        ("rtl", "\u202eevil\u202c \u200fאבג\u200e"),
        ("zero-width", "zw\u200b\u200c\u200d\u2060\ufeff"),
        (
            "emoji",
            "emoji \U0001f600\U0001f469\u200d\U0001f469\u200d\U0001f467 \U0001f3f3\ufe0f\u200d\U0001f308",
        ),
        ("combining", "e" + "\u0301" * 64),
        ("line-separators", "a\u2028b\u2029c"),
        ("max-code-point", "\U0010ffff\U000e0001"),
        ("math-letters", "\U0001d573\U0001d58a\U0001d591"),
        ("arabic", "مرحبا بالعالم"),
        ("cjk", "日本語のテキストです。次の文。"),
        ("quotes", "\\\"'`</script>"),
        ("format", "%s%n{0}${x}"),
        ("newlines", "\n\r\n\t"),
    ]


def _strings(
    facts: ServerFacts,
    judge: Callable[[str], Verdict],
    *,
    nullable: bool = True,
    required: bool = False,
) -> st.SearchStrategy[Variant]:
    """Hostile strings for a text field, each judged; lone surrogates may also be refused."""

    def verdict(text: str) -> Verdict:
        result = judge(text)
        return result | SURROGATE if _has_surrogate(text) else result

    fixed: list[Variant] = [
        (label, text, verdict(text)) for label, text in _hostile_strings(facts.max_message_bytes)
    ]
    fixed += [
        (label, v, bad("invalid_field")) for label, v in _WRONG_TYPES if not isinstance(v, str)
    ]
    fixed += [("number", 5, bad("invalid_field"))]
    if required:
        fixed.append(("null", None, bad("invalid_field")))
    elif nullable:
        fixed.append(("null", None, OK))
    return st.one_of(
        _sample(fixed),
        st.text(max_size=48).map(lambda text: ("random-text", text, verdict(text))),
    )


def _format_verdict(fmt: dict[str, Any], *, at_create: bool) -> Verdict:
    """The verdict for an ``output_format`` whose values all have the right wire types."""
    enc = fmt.get("encoding", "pcm_s16le")
    rate = fmt.get("sample_rate", 24000)
    container = fmt.get("container", "raw")
    bitrate = fmt.get("bitrate")
    frame_ms = fmt.get("frame_ms")
    if enc not in ENCODINGS or rate not in ALL_RATES or container not in CONTAINERS:
        return bad("unsupported_value")
    if frame_ms is not None and frame_ms not in FRAME_MS:
        return bad("unsupported_value")
    if bitrate is not None and not BITRATE_RANGE[0] <= bitrate <= BITRATE_RANGE[1]:
        return bad("invalid_field")
    if enc == "opus" and rate not in OPUS_RATES:
        return bad("unsupported_value")
    if enc != "opus" and (rate not in PCM_RATES or container != "raw"):
        return bad("unsupported_value")
    # Rules the audio stage applies when a context opens: session.update may take
    # them silently and let the context fail.
    late = bad("unsupported_value") if at_create else maybe("unsupported_value")
    if bitrate is not None and enc != "opus":
        return late
    if frame_ms is not None and rate * frame_ms % 1000:
        return late
    return OK


_FORMAT_BASES: tuple[dict[str, Any], ...] = (
    {},
    {"encoding": "pcm_s16le", "sample_rate": 24000},
    {"encoding": "pcm_s16le", "sample_rate": 16000},
    {"encoding": "pcm_f32le", "sample_rate": 48000},
    {"encoding": "pcm_mulaw", "sample_rate": 8000},
    {"encoding": "pcm_alaw", "sample_rate": 8000},
    {"encoding": "pcm_s16le", "sample_rate": 22050},
    {"encoding": "pcm_s16le", "sample_rate": 44100},
    {"encoding": "opus", "sample_rate": 48000, "container": "raw", "frame_ms": 20},
    {"encoding": "opus", "sample_rate": 24000, "container": "ogg"},
    {"encoding": "opus", "sample_rate": 8000, "bitrate": 6000, "frame_ms": 60},
    {"encoding": "opus", "sample_rate": 12000, "container": "ogg", "bitrate": 510_000},
)


@st.composite
def _output_format(draw: st.DrawFn, at_create: bool) -> Variant:
    base = dict(draw(st.sampled_from(_FORMAT_BASES)))
    key = draw(
        st.sampled_from(
            [
                "none",
                "whole",
                "encoding",
                "sample_rate",
                "container",
                "bitrate",
                "frame_ms",
                "unknown-key",
            ]
        )
    )
    if key == "none":
        return ("valid", base, _format_verdict(base, at_create=at_create))
    if key == "whole":
        label, value, verdict = draw(
            _sample(
                [
                    ("null", None, OK),
                    ("string", "pcm_s16le", bad("invalid_field")),
                    ("number", 24000, bad("invalid_field")),
                    ("list", [base], bad("invalid_field")),
                    (
                        "nested",
                        {"encoding": {"encoding": "opus"}},
                        bad("invalid_field", "unsupported_value"),
                    ),
                ]
            )
        )
        return (f"whole={label}", value, verdict)
    if key == "unknown-key":
        base["x_fuzz"] = {"deep": [1, [2, [3]]]}
        return ("unknown-key", base, _format_verdict(base, at_create=at_create))
    if key in ("encoding", "container"):
        label, value, verdict = draw(_enum(ENCODINGS if key == "encoding" else CONTAINERS))
    elif key == "bitrate":
        label, value, verdict = draw(_number("int", *BITRATE_RANGE))
    else:
        allowed = ALL_RATES if key == "sample_rate" else FRAME_MS
        label, value, verdict = draw(_literal_int(allowed))
    name = f"{key}={label}"
    if value is None:
        base.pop(key, None)
    else:
        base[key] = value
        if verdict.must or verdict.codes:
            # A wrong wire type, or a value outside the field's own range, is refused
            # before any rule that spans fields is looked at.
            return (name, base, verdict)
    return (name, base, _format_verdict(base, at_create=at_create))


_BOOL_REQUIRED: tuple[Variant, ...] = (
    ("true", True, OK),
    ("false", False, OK),
    ("string", "true", bad("invalid_field")),
    ("int", 1, bad("invalid_field")),
    ("zero", 0, bad("invalid_field")),
    ("null", None, bad("invalid_field")),
    ("list", [True], bad("invalid_field")),
)
_BOOL_OPTIONAL: tuple[Variant, ...] = (*_BOOL_REQUIRED[:-2], ("null", None, OK), _BOOL_REQUIRED[-1])

MODEL_REFUSALS = ("invalid_field", "unsupported_value")
"""What a model may answer to a value the protocol allows but the model cannot use."""


def _embedding(facts: ServerFacts, *, cap: bool) -> st.SearchStrategy[Variant]:
    """``speaker_embedding`` values; ``cap``: more than EMBEDDING_MAX entries must be refused."""
    over = bad("invalid_field") if cap else maybe("invalid_field", *MODEL_REFUSALS)
    fits = facts.max_message_bytes - 1024
    variants: list[Variant] = [
        ("empty", [], maybe(*MODEL_REFUSALS)),
        ("one", [0.5], maybe(*MODEL_REFUSALS)),
        ("small", [0.125] * 16, maybe(*MODEL_REFUSALS)),
        ("extremes", [1e308, -1e308, 5e-324, -0.0], maybe(*MODEL_REFUSALS)),
        ("nested", [[0.5]], bad("invalid_field")),
        ("strings", ["0.5"], bad("invalid_field")),
        ("bools", [True], bad("invalid_field")),
        ("nulls", [None], bad("invalid_field")),
        ("NaN", [0.5, Raw("NaN")], UNPARSABLE),
        ("1e309", [Raw("1e309")], bad("invalid_field", "invalid_json", echo="optional")),
        ("scalar", 0.5, bad("invalid_field")),
        ("object", {"0": 0.5}, bad("invalid_field")),
        ("null", None, OK),
    ]
    if fits > EMBEDDING_MAX * 5:
        variants.append(("max", [0.25] * EMBEDDING_MAX, maybe(*MODEL_REFUSALS)))
        variants.append(("max+1", [0.25] * (EMBEDDING_MAX + 1), over))
    variants.append(("huge", [0] * (fits // 2), maybe("invalid_field", *MODEL_REFUSALS)))
    return _sample(variants)


@functools.cache
def _cid_variants() -> list[tuple[str, Any, str, Verdict]]:
    """(label, node, kind, verdict): ``same`` targets the step's context, ``other`` is a
    well-formed id of no context, ``invalid`` breaks the id grammar."""
    invalid = bad("invalid_field")
    return [
        ("same", Cid("a"), "same", OK),
        ("other", Cid("zz"), "other", OK),
        ("all-allowed-chars", Cid("a", tail="_.:-Z9"), "other", OK),
        ("len128", Cid("m", length=CONTEXT_ID_MAX), "other", OK),
        ("len129", Cid("m", length=CONTEXT_ID_MAX + 1), "invalid", invalid),
        ("len20000", Cid("m", length=20_000), "invalid", invalid),
        ("empty", "", "invalid", invalid),
        ("space", Cid("a", tail=" b"), "invalid", invalid),
        ("slash", Cid("a", tail="/b"), "invalid", invalid),
        ("accent", Cid("a", tail="\u00e9"), "invalid", invalid),
        ("nul", Cid("a", tail="\x00"), "invalid", invalid),
        # PROTOCOL.md's grammar is ^[A-Za-z0-9_.:-]+$ for the whole id: no newline.
        ("trailing-newline", Cid("a", tail="\n"), "invalid", invalid),
        ("rtl", Cid("a", tail="\u202e"), "invalid", invalid),
        ("emoji", Cid("a", tail="\U0001f600"), "invalid", invalid),
        (
            "surrogate",
            Cid("a", tail="\ud800"),
            "invalid",
            bad("invalid_field", "invalid_json", echo="optional"),
        ),
        ("int", 5, "invalid", invalid),
        ("bool", True, "invalid", invalid),
        ("null", None, "invalid", invalid),
        ("list", ["a"], "invalid", invalid),
        ("object", {"id": "a"}, "invalid", invalid),
        ("missing", MISSING, "invalid", bad("missing_field")),
    ]


@functools.cache
def _event_ids(facts: ServerFacts) -> list[Variant]:
    long_ok = maybe("invalid_field", echo="optional")
    fill = max(300, min(60_000, facts.max_message_bytes - 2048))
    return [
        ("plain", EventId(), OK),
        ("unicode-tail", EventId(tail="\u202e\U0001f600\u200b"), OK),
        # A control character in an id: echoing it fits, so does refusing it.
        ("nul-tail", EventId(tail="\x00"), maybe("invalid_field", echo="optional")),
        ("len300", EventId(pad=300), long_ok),
        ("len5000", EventId(pad=5000), long_ok),
        ("len-fill", EventId(pad=fill), long_ok),
        ("surrogate", EventId(tail="\ud800"), SURROGATE),
        ("int", 5, bad("invalid_field", echo="optional")),
        ("bool", True, bad("invalid_field", echo="optional")),
        ("list", ["f"], bad("invalid_field", echo="optional")),
        ("object", {"id": 1}, bad("invalid_field", echo="optional")),
        ("NaN", Raw("NaN"), UNPARSABLE),
        ("null", None, OK),
    ]


@functools.cache
def _types(mtype: str, *, vllm: bool = False) -> list[Variant]:
    unknown = bad("unknown_type")
    wrong = bad("unknown_type", "invalid_field")
    return [
        ("missing", MISSING, unknown),
        ("empty", "", unknown),
        ("unknown", "context.explode", unknown),
        ("server-type", "session.created", unknown),
        ("other-endpoint-type", "context.create" if vllm else "input.text", unknown),
        ("upper", mtype.upper(), unknown),
        ("padded", f" {mtype}", unknown),
        ("nul", mtype + "\x00", wrong),
        ("long", "t" * 10_000, unknown),
        ("surrogate", mtype + "\udc00", bad("unknown_type", *SURROGATE.codes, echo="optional")),
        ("int", 5, wrong),
        ("null", None, wrong),
        ("list", [mtype], wrong),
        ("object", {"type": mtype}, wrong),
    ]


@functools.cache
def _extras(facts: ServerFacts) -> list[Variant]:
    fits = facts.max_message_bytes - 1024
    return [
        ("int", ("x_fuzz", 1), OK),
        ("object", ("x_fuzz", {"a": [1, {"b": None}]}), OK),
        ("nested-64", ("x_fuzz", [[[[[[[[1]]]]]]]] * 8), OK),
        ("long-string", ("x_fuzz", "s" * (fits // 2)), OK),
        ("big-list", ("x_fuzz", [0] * (fits // 4)), OK),
        ("empty-key", ("", "v"), OK),
        ("nul-key", ("\x00", "v"), OK),
        ("emoji-key", ("\U0001f600", "v"), OK),
        ("upper-type-key", ("TYPE", "context.create"), OK),
        ("NaN", ("x_fuzz", Raw("NaN")), UNPARSABLE),
        (
            "1e309",
            ("x_fuzz", Raw("1e309")),
            maybe("invalid_json", "invalid_field", echo="optional"),
        ),
    ]


def _voice_judge(facts: ServerFacts, *, at_create: bool) -> Callable[[str], Verdict]:
    def judge(text: str) -> Verdict:
        if text in facts.voices:
            return OK
        return (bad if at_create else maybe)("unknown_voice", "invalid_field")

    return judge


def _language_judge(facts: ServerFacts, *, at_create: bool) -> Callable[[str], Verdict]:
    def judge(text: str) -> Verdict:
        if text in facts.languages:
            return OK
        if text == "":
            return maybe("unsupported_language", "invalid_field")
        return (bad if at_create else maybe)("unsupported_language", "invalid_field")

    return judge


def _text_verdict(facts: ServerFacts, text: str) -> Verdict:
    if len(text) > facts.max_text_chars:
        return bad("text_too_long")
    if _has_surrogate(text):
        return SURROGATE
    if _has_control(text):
        # Speaking around a control character fits; so does refusing the text.
        return maybe("invalid_field")
    return OK


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" and ch not in "\t\n\r" for ch in text)


def _free_text(text: str) -> Verdict:
    return OK if text in ("", "plain words") else maybe(*MODEL_REFUSALS)


def _buffer() -> st.SearchStrategy[Variant]:
    def delay(v: float) -> Verdict:
        if v < 0:
            return bad("invalid_field")
        if v == 0 or v > MAX_DELAY_MS_MAX:
            # 0 ("cut at every word") and very long delays are the server's call.
            return maybe("invalid_field")
        return OK

    whole = _sample(
        [
            ("null", None, OK),
            ("empty", {}, OK),
            ("string", "auto", bad("invalid_field")),
            ("list", [], bad("invalid_field")),
            ("unknown-key", {"x_fuzz": 1}, OK),
        ]
    )
    mode = _enum(("auto", "manual")).map(
        lambda v: (f"mode={v[0]}", {"mode": v[1]} if v[1] is not None else {}, v[2])
    )
    delays = _number("int", 0, None, judge=delay).map(
        lambda v: (f"max_delay_ms={v[0]}", {"mode": "auto", "max_delay_ms": v[1]}, v[2])
    )
    return st.one_of(whole, mode, delays, delays)


def _idle_judge(facts: ServerFacts) -> Callable[[float], Verdict]:
    def judge(v: float) -> Verdict:
        if v <= 0 or v > facts.idle_timeout_s:
            return bad("invalid_field")
        if v < IDLE_MIN_S:
            return maybe("invalid_field", closes=(CLOSE_IDLE,))
        return maybe(closes=(CLOSE_IDLE,)) if v < 5 else OK

    return judge


def _sampling_fields() -> dict[str, st.SearchStrategy[Variant]]:
    return {
        "temperature": _number("float", 0, 2),
        "top_k": _number("int", 0),
        "top_p": _number("float", 0, 1, lo_open=True),
        "repetition_penalty": _number("float", 0, 10, lo_open=True),
        "seed": _number("int", 0, INT64_MAX),
        "max_new_tokens": _number("int", 1),
    }


@functools.cache
def _native_fields(facts: ServerFacts, mtype: str) -> dict[str, st.SearchStrategy[Variant]]:
    """Field -> hostile values with verdicts, for each native client message (except
    ``context_id``, which every context message shares)."""
    strings = functools.partial(_strings, facts)
    if mtype == "session.update":
        return {
            "model": strings(
                lambda s: OK if s == facts.model else bad("unknown_model", "invalid_field")
            ),
            "voice": strings(_voice_judge(facts, at_create=False)),
            "language": strings(_language_judge(facts, at_create=False)),
            "speed": _number("float", 0.25, 4.0),
            "instructions": strings(_free_text),
            "output_format": _output_format(at_create=False),
            "audio_transport": _enum(("binary", "base64")),
            "timestamps": _enum(("none", "word")),
            "idle_timeout_s": _number("float", judge=_idle_judge(facts)),
            **_sampling_fields(),
        }
    if mtype == "context.create":
        return {
            "voice": strings(_voice_judge(facts, at_create=True)),
            "language": strings(_language_judge(facts, at_create=True)),
            "speed": _number("float", 0.25, 4.0),
            "instructions": strings(_free_text),
            "output_format": _output_format(at_create=True),
            "ref_audio": st.one_of(
                strings(lambda s: maybe(*MODEL_REFUSALS, "unknown_voice")),
                _sample(
                    [
                        ("base64-noise", "QUJD" * 750, maybe(*MODEL_REFUSALS, "unknown_voice")),
                        (
                            "wav-header",
                            "UklGRiQAAABXQVZFZm10IBAAAAABAAEAgD4AAAB9AAACABAAZGF0YQAAAAA=",
                            maybe(*MODEL_REFUSALS, "unknown_voice"),
                        ),
                    ]
                ),
            ),
            "ref_text": strings(_free_text),
            "speaker_embedding": _embedding(facts, cap=False),
            "buffer": _buffer(),
            **_sampling_fields(),
        }
    if mtype == "text.append":
        return {
            "text": strings(functools.partial(_text_verdict, facts), required=True),
            "flush": _sample(_BOOL_REQUIRED),
        }
    if mtype == "context.flush":
        return {
            "flush_id": strings(
                lambda s: (
                    OK if len(s) <= ECHO_MAX and not _has_control(s) else maybe("invalid_field")
                )
            ),
        }
    if mtype == "context.cancel":
        return {"played_ms": _number("int", 0)}
    return {}


# --- steps -------------------------------------------------------------------------


def _msg(mtype: str, **fields: Any) -> dict[str, Any]:
    return {"type": mtype, **fields, "event_id": EventId()}


def _probe(label: str, node: Any, verdict: Verdict = OK) -> ProbeSpec:
    return ProbeSpec(Json(node), label, verdict)


def _create(name: str = "a", **fields: Any) -> dict[str, Any]:
    return _msg("context.create", context_id=Cid(name), **fields)


def _append(name: str, text: str, **fields: Any) -> dict[str, Any]:
    return _msg("text.append", context_id=Cid(name), text=text, **fields)


def _cancel(context_id: Any) -> dict[str, Any]:
    return _msg("context.cancel", context_id=context_id)


def _cleanup(*context_ids: Any) -> list[ProbeSpec]:
    """Cancel what the step may have opened, so the next step starts with no context."""
    return [_probe("cleanup.cancel", _cancel(c), maybe("unknown_context")) for c in context_ids]


def _restore(facts: ServerFacts) -> ProbeSpec:
    """Session settings back to what a fresh session has (as far as they can go back)."""
    node = _msg(
        "session.update",
        model=facts.model,
        voice=facts.voices[0],
        language=facts.languages[0],
        speed=1.0,
        output_format={},
        audio_transport="binary",
        timestamps="none",
        idle_timeout_s=facts.idle_timeout_s,
    )
    return _probe("restore.session.update", node)


_CONTEXT_TYPES = ("context.create", "text.append", "context.flush", "context.end", "context.cancel")
_SINGLE_TYPES = (
    *("session.update",) * 4,
    *("context.create",) * 5,
    *("text.append",) * 4,
    *("context.flush",) * 2,
    *("context.end",) * 2,
    *("context.cancel",) * 2,
    "keepalive",
    "session.close",
)
_POISONED = (
    "unknown_voice",
    "unsupported_language",
    "unknown_model",
    "unsupported_value",
    "invalid_field",
)
"""What a context may be refused for after a session.update that the server took but a
context cannot use (an unknown voice, a bitrate on PCM, ...)."""


@st.composite
def _single(draw: st.DrawFn, facts: ServerFacts) -> Step:
    """One client message with one thing changed, and what it needs around it."""
    mtype = draw(st.sampled_from(_SINGLE_TYPES))
    fields = _native_fields(facts, mtype)
    targets = [*fields, *fields, "event_id", "type", "extra", "mangle", "valid"]
    if mtype in _CONTEXT_TYPES:
        targets += ["context_id", "context_id"]
    if mtype in ("context.create", "text.append"):
        targets.append("missing")
    if mtype == "context.create":
        targets.append("ref_audio+speaker_embedding")
    if mtype == "keepalive":
        targets.append("duplicate-key")
    target = draw(st.sampled_from(targets))

    msg: dict[str, Any] = {"type": mtype}
    if mtype in _CONTEXT_TYPES:
        msg["context_id"] = Cid("a")
    if mtype == "text.append":
        msg["text"] = "fuzz words "
    msg["event_id"] = EventId()
    label, verdict, cid_kind = "valid", OK, "same"
    body: Body | None = None

    if target == "context_id":
        label, node, cid_kind, verdict = draw(st.sampled_from(_cid_variants()))
        if cid_kind == "other" and mtype in ("context.flush", "context.end", "context.cancel"):
            verdict = bad("unknown_context")
        msg["context_id"] = node
    elif target in fields:
        label, value, verdict = draw(fields[target])
        msg[target] = value
    elif target == "event_id":
        label, value, verdict = draw(_sample(_event_ids(facts)))
        msg["event_id"] = value
    elif target == "type":
        label, value, verdict = draw(_sample(_types(mtype)))
        msg["type"] = value
    elif target == "extra":
        label, (key, value), verdict = draw(_sample(_extras(facts)))
        msg[key] = value
    elif target == "missing":
        field_name = draw(
            st.sampled_from(["context_id", "text"] if mtype == "text.append" else ["context_id"])
        )
        label, verdict = field_name, bad("missing_field")
        msg[field_name] = MISSING
    elif target == "ref_audio+speaker_embedding":
        msg["ref_audio"], msg["speaker_embedding"] = "QUJD", [0.5]
        verdict = bad("invalid_field")
    elif target == "duplicate-key":
        other = draw(st.sampled_from(["keepalive", "session.update", "no.such"]))
        label, verdict = (
            f"type-twice-{other}",
            maybe("unknown_type", "invalid_field", "invalid_json"),
        )
        body = Json(Pairs((("type", "keepalive"), ("event_id", EventId()), ("type", other))))
    elif target == "mangle":
        how = draw(st.sampled_from(["truncate", "trail", "lead", "quotes", "comma", "whitespace"]))
        arg = draw(st.integers(1, 999))
        label = f"{how}-{arg % 6}" if how in ("trail", "lead") else how
        body = Mangled(msg, how, arg)
        verdict = OK if how == "whitespace" else UNPARSABLE
    if draw(st.booleans()) and "type" in msg:
        msg = {**{k: v for k, v in msg.items() if k != "type"}, "type": msg["type"]}
    if mtype == "session.close" and not verdict.must:
        verdict = verdict | maybe(closes=(CLOSE_NORMAL,))
    main = ProbeSpec(body or Json(msg), f"{mtype}.{target}={label}", verdict)

    probes: list[ProbeSpec] = []
    if mtype in ("context.flush", "context.end", "context.cancel"):
        probes += [
            _probe("prep.create", _create("a")),
            _probe("prep.append", _append("a", "prep words ")),
        ]
    probes.append(main)
    if mtype == "session.update":
        if draw(st.booleans()):
            # Use the settings once before they go back: a context under them.
            use = maybe(*_POISONED) if (verdict.codes or verdict.must) else OK
            probes += [
                _probe("use.create", _create("u"), use),
                _probe(
                    "use.append",
                    _append("u", "under new settings "),
                    use | maybe("context_closed") if use.codes else OK,
                ),
                _probe("use.cancel", _cancel(Cid("u")), maybe("unknown_context")),
            ]
        probes.append(_restore(facts))
    if mtype in _CONTEXT_TYPES:
        probes += _cleanup(Cid("a"))
        variant = msg.get("context_id")
        if target == "context_id" and isinstance(variant, Cid) and variant != Cid("a"):
            # Also where the id is invalid: a server that took it anyway must not be
            # left with a context that counts against the next step's limit.
            cleanup = maybe("unknown_context", *verdict.codes, echo=verdict.echo)
            probes.append(_probe("cleanup.cancel", _cancel(variant), cleanup))
    return Step(f"ws.{mtype}.{target}", tuple(probes))


@st.composite
def _burst(draw: st.DrawFn, facts: ServerFacts) -> Step:
    """create -> append -> cancel, over and over, re-creating ids still being cancelled."""
    rounds = draw(st.integers(1, 6))
    ids = draw(st.integers(1, min(3, facts.max_contexts)))
    text = draw(st.sampled_from(["hello there ", "x", "", "Hi. How are you? ", "\U0001f600 "]))
    flush = draw(st.booleans())
    probes: list[ProbeSpec] = []
    for i in range(rounds):
        name, again = f"b{i % ids}", i >= ids
        probes += [
            _probe("burst.create", _create(name), maybe("context_exists") if again else OK),
            _probe(
                "burst.append",
                _append(name, text, flush=flush),
                maybe("context_closed") if again else OK,
            ),
            _probe("burst.cancel", _cancel(Cid(name))),
        ]
    return Step("seq.burst", tuple(probes))


@st.composite
def _too_many(draw: st.DrawFn, facts: ServerFacts) -> Step:
    limit = facts.max_contexts
    count = limit + draw(st.integers(1, 3))
    probes = [
        _probe("too-many.create", _create(f"c{i}"), OK if i < limit else bad("too_many_contexts"))
        for i in range(count)
    ]
    probes += [
        _probe(
            "too-many.implicit-create",
            _append("c-implicit", "one too many "),
            bad("too_many_contexts"),
        ),
        # PROTOCOL.md: a cancelled context stops counting at once.
        _probe("too-many.cancel-one", _cancel(Cid("c0"))),
        _probe("too-many.create-after-cancel", _create("c-late")),
    ]
    probes += [_probe("cleanup.cancel", _cancel(Cid(f"c{i}"))) for i in range(1, limit)]
    probes += [
        _probe("cleanup.cancel-refused", _cancel(Cid(f"c{i}")), bad("unknown_context"))
        for i in range(limit, count)
    ]
    probes += [
        _probe("cleanup.cancel-refused", _cancel(Cid("c-implicit")), bad("unknown_context")),
        _probe("cleanup.cancel", _cancel(Cid("c-late"))),
    ]
    return Step("seq.too-many-contexts", tuple(probes))


@st.composite
def _after_end(draw: st.DrawFn, facts: ServerFacts) -> Step:
    late = [
        _probe("after-end.append", _append("a", "too late "), bad("context_closed")),
        _probe(
            "after-end.flush", _msg("context.flush", context_id=Cid("a")), bad("context_closed")
        ),
        _probe("after-end.end", _msg("context.end", context_id=Cid("a")), bad("context_closed")),
    ]
    order = draw(st.permutations(late))
    probes = [
        _probe("after-end.create", _create("a")),
        _probe(
            "after-end.append-first", _append("a", draw(st.sampled_from(["Short. ", "", "words "])))
        ),
        _probe("after-end.end-first", _msg("context.end", context_id=Cid("a"))),
        *order,
        _probe("after-end.cancel", _cancel(Cid("a"))),
    ]
    return Step("seq.append-after-end", tuple(probes))


@st.composite
def _ghosts(draw: st.DrawFn, facts: ServerFacts) -> Step:
    played = draw(st.sampled_from([None, 0, 1500, INT64_MAX]))
    cancel = _msg("context.cancel", context_id=Cid("g3"))
    if played is not None:
        cancel["played_ms"] = played
    probes = [
        _probe(
            "ghost.flush",
            _msg("context.flush", context_id=Cid("g1"), flush_id="f"),
            bad("unknown_context"),
        ),
        _probe("ghost.end", _msg("context.end", context_id=Cid("g2")), bad("unknown_context")),
        _probe("ghost.cancel", cancel, bad("unknown_context")),
    ]
    return Step("seq.unknown-ids", tuple(draw(st.permutations(probes))))


@st.composite
def _recreate(draw: st.DrawFn, facts: ServerFacts) -> Step:
    """Duplicate creates, double cancels, and re-creating an id that is ending or cancelling."""
    finish = draw(st.sampled_from(["cancel", "end"]))
    stop = _cancel(Cid("a")) if finish == "cancel" else _msg("context.end", context_id=Cid("a"))
    probes = [
        _probe("recreate.create", _create("a")),
        _probe("recreate.duplicate", _create("a", voice=facts.voices[-1]), bad("context_exists")),
        _probe("recreate.append", _append("a", "first life ")),
        _probe(f"recreate.{finish}", stop),
        _probe(
            f"recreate.{finish}-again", stop, OK if finish == "cancel" else bad("context_closed")
        ),
        _probe("recreate.create-again", _create("a"), maybe("context_exists")),
        _probe("recreate.append-again", _append("a", "second life "), maybe("context_closed")),
        _probe("recreate.cancel", _cancel(Cid("a"))),
    ]
    return Step("seq.recreate", tuple(probes))


@st.composite
def _implicit(draw: st.DrawFn, facts: ServerFacts) -> Step:
    flush_label, flush_id, flush_verdict = draw(_native_fields(facts, "context.flush")["flush_id"])
    probes = [
        _probe("implicit.append", _append("a", "Opened by text. ", flush=draw(st.booleans()))),
        _probe("implicit.append-more", _append("a", "More")),
        _probe(
            f"implicit.flush.flush_id={flush_label}",
            _msg("context.flush", context_id=Cid("a"), flush_id=flush_id),
            flush_verdict,
        ),
        _probe("implicit.end", _msg("context.end", context_id=Cid("a"))),
        _probe("implicit.cancel", _cancel(Cid("a"))),
    ]
    return Step("seq.implicit-create", tuple(probes))


@st.composite
def _too_long(draw: st.DrawFn, facts: ServerFacts) -> Step:
    limit = facts.max_text_chars
    if limit + 512 > facts.max_message_bytes:
        return Step("seq.text-too-long", (_probe("too-long.keepalive", _msg("keepalive")),))
    probes = [
        _probe("too-long.create", _create("a")),
        _probe("too-long.over", _append("a", "x" * (limit + 1)), bad("text_too_long")),
        _probe("too-long.small", _append("a", "ok ")),
    ]
    if draw(st.booleans()):
        probes += [
            _probe("too-long.to-the-limit", _append("a", "y" * (limit - 3))),
            _probe("too-long.one-more", _append("a", "z"), bad("text_too_long")),
        ]
    probes += [
        _probe("too-long.cancel", _cancel(Cid("a"))),
        _probe("too-long.implicit-over", _append("b", "w" * (limit + 1)), bad("text_too_long")),
        _probe("cleanup.cancel-refused", _cancel(Cid("b")), bad("unknown_context")),
    ]
    return Step("seq.text-too-long", tuple(probes))


@st.composite
def _update_extremes(draw: st.DrawFn, facts: ServerFacts) -> Step:
    """session.update with extreme but typed values, then a context under them."""
    long_chars = max(1000, facts.max_message_bytes - 4096)
    choices: list[tuple[str, Any]] = [
        ("idle_timeout_s", 1e-9),
        ("idle_timeout_s", 1e-3),
        ("idle_timeout_s", IDLE_MIN_S),
        ("idle_timeout_s", facts.idle_timeout_s),
        ("instructions", "I" * long_chars),
        ("speed", 0.25),
        ("speed", 4.0),
        ("temperature", 0),
        ("temperature", 2),
        ("top_p", 5e-324),
        ("top_k", 2**63),
        ("seed", INT64_MAX),
        ("max_new_tokens", 1),
        ("max_new_tokens", 2**62),
        ("language", ""),
        ("voice", facts.voices[-1]),
        (
            "output_format",
            {"encoding": "opus", "sample_rate": 8000, "frame_ms": 60, "bitrate": 6000},
        ),
        ("output_format", {"encoding": "pcm_alaw", "sample_rate": 8000}),
        ("audio_transport", "base64"),
        ("timestamps", "word"),
    ]
    picked = draw(
        st.lists(st.sampled_from(choices), min_size=1, max_size=3, unique_by=lambda c: c[0])
    )
    fields = dict(picked)
    verdict = OK
    idle = fields.get("idle_timeout_s")
    if idle is not None:
        verdict = verdict | _idle_judge(facts)(idle)
    if (
        "instructions" in fields
        or "top_k" in fields
        or "max_new_tokens" in fields
        or "language" in fields
    ):
        verdict = verdict | maybe("invalid_field", "unsupported_language")
    update = _probe(
        "extremes.update."
        + "+".join(
            f"{k}={v if not isinstance(v, str) or len(v) < 20 else 'long'}" for k, v in picked
        ),
        _msg("session.update", **fields),
        verdict,
    )
    use = OK if not verdict.codes else maybe(*_POISONED)
    probes = [
        update,
        _probe("extremes.create", _create("a"), use),
        _probe(
            "extremes.append",
            _append("a", "Speaking under extreme settings. "),
            use | maybe("context_closed"),
        ),
        _probe(
            "extremes.flush",
            _msg("context.flush", context_id=Cid("a")),
            use | maybe("context_closed", "unknown_context"),
        ),
        _probe("extremes.cancel", _cancel(Cid("a")), maybe("unknown_context")),
        _restore(facts),
    ]
    return Step("seq.update-extremes", tuple(probes))


_CLOSING_FOLLOWUPS: tuple[tuple[str, Body], ...] = (
    ("keepalive", Json(_msg("keepalive"))),
    ("create", Json(_create("late"))),
    ("append", Json(_append("a", "after close "))),
    ("update", Json(_msg("session.update", speed=2.0))),
    ("close-again", Json(_msg("session.close"))),
    ("garbage", Verbatim("{not json")),
    ("unknown-type", Json(_msg("no.such.type"))),
    ("binary", Binary(12)),
)


@st.composite
def _close_then_more(draw: st.DrawFn, facts: ServerFacts) -> Step:
    probes: list[ProbeSpec] = []
    if draw(st.booleans()):
        probes += [
            _probe("close.create", _create("a")),
            _probe("close.append", _append("a", "Finish me before you close. ")),
        ]
    probes.append(
        _probe("close.session.close", _msg("session.close"), maybe(closes=(CLOSE_NORMAL,)))
    )
    after = maybe("session_closing", echo="optional", closes=(CLOSE_NORMAL,))
    for label, body in draw(st.lists(st.sampled_from(_CLOSING_FOLLOWUPS), min_size=1, max_size=4)):
        probes.append(ProbeSpec(body, f"close.then-{label}", after))
    return Step("seq.close-then-more", tuple(probes))


@st.composite
def _cancel_played(draw: st.DrawFn, facts: ServerFacts) -> Step:
    label, value, verdict = draw(_native_fields(facts, "context.cancel")["played_ms"])
    probes = [
        _probe("played.create", _create("a")),
        _probe("played.append", _append("a", "Cancel me. ")),
        _probe(
            f"played.cancel.played_ms={label}",
            _msg("context.cancel", context_id=Cid("a"), played_ms=value),
            verdict,
        ),
        _probe("cleanup.cancel", _cancel(Cid("a"))),
    ]
    return Step("seq.cancel-played-ms", tuple(probes))


@st.composite
def _hostile_text(draw: st.DrawFn, facts: ServerFacts) -> Step:
    """Hostile text the model has to speak (or refuse cleanly), under hostile buffering;
    the step waits for the context to end, so failures of the synthesis count here."""
    field = _native_fields(facts, "text.append")["text"]
    curated = [v for v in _hostile_strings(facts.max_message_bytes) if len(v[1]) <= 400]
    curated += [("nul-in-sentence", "Hello\x00world. "), ("nul-only", "\x00")]
    judged = st.sampled_from(curated).map(lambda v: (v[0], v[1], _text_verdict(facts, v[1])))
    label, text, verdict = draw(
        st.one_of(
            judged, judged, field.filter(lambda v: isinstance(v[1], str) and len(v[1]) <= 400)
        )
    )
    buffers: list[tuple[str, Any, Verdict]] = [
        ("default", None, OK),
        ("default", None, OK),
        ("max_delay_ms=0", {"mode": "auto", "max_delay_ms": 0}, maybe("invalid_field")),
        ("max_delay_ms=1", {"mode": "auto", "max_delay_ms": 1}, OK),
        ("manual", {"mode": "manual"}, OK),
    ]
    buffer_label, buffer, create = draw(st.sampled_from(buffers))
    fields = {"buffer": buffer} if buffer is not None else {}
    # If the create is refused, the append opens the context with session defaults.
    uncertain = create.codes or verdict.must
    probes = [
        _probe(f"hostile-text.create.buffer={buffer_label}", _create("a", **fields), create),
        _probe(f"hostile-text.append.text={label}", _append("a", text), verdict),
        _probe(
            "hostile-text.end",
            _msg("context.end", context_id=Cid("a")),
            maybe("unknown_context") if uncertain else OK,
        ),
    ]
    return Step("seq.hostile-text", tuple(probes), settle=True)


@st.composite
def _long_event_id(draw: st.DrawFn, facts: ServerFacts) -> Step:
    """Invalid messages whose event_id is huge: the error must not echo all of it."""
    pad = draw(
        st.sampled_from(
            [ECHO_MAX + 1, 1000, 5000, max(300, min(60_000, facts.max_message_bytes - 2048))]
        )
    )
    eid = EventId(pad=pad)
    kind = draw(st.sampled_from(["ghost-flush", "unknown-type", "wrong-type"]))
    if kind == "ghost-flush":
        node: dict[str, Any] = {"type": "context.flush", "context_id": Cid("g"), "event_id": eid}
        verdict = bad("unknown_context", "invalid_field", echo="optional")
    elif kind == "unknown-type":
        node = {"type": "no.such.type", "event_id": eid}
        verdict = bad("unknown_type", "invalid_field", echo="optional")
    else:
        node = {"type": "session.update", "speed": "fast", "event_id": eid}
        verdict = bad("invalid_field", echo="optional")
    return Step("seq.long-event-id", (_probe(f"long-event-id.{kind}", node, verdict),))


_NON_OBJECTS = (
    "5",
    '"str"',
    "null",
    "true",
    "[]",
    '[{"type":"keepalive"}]',
    "-0",
    '"\\ud800"',
    "1e309",
)


@st.composite
def _garbage(draw: st.DrawFn, facts: ServerFacts) -> Step:
    """Text frames that are not a JSON object."""
    not_a_message = bad("invalid_json", "unknown_type", "invalid_field", echo="optional")
    kind = draw(
        st.sampled_from(
            [
                "random-text",
                "latin1-bytes",
                "empty",
                "whitespace",
                "non-object",
                "non-object",
                "nul-after",
            ]
        )
    )
    if kind == "random-text":
        text = draw(st.text(max_size=64))
    elif kind == "latin1-bytes":
        text = draw(st.binary(max_size=64)).decode("latin-1")
    elif kind == "empty":
        text = ""
    elif kind == "whitespace":
        text = " \n\t "
    elif kind == "non-object":
        text = draw(st.sampled_from(_NON_OBJECTS))
    else:
        text = '{"type":"keepalive"}\x00'
    return Step(f"garbage.{kind}", (ProbeSpec(Verbatim(text), f"garbage.{kind}", not_a_message),))


@st.composite
def _binary_step(draw: st.DrawFn, facts: ServerFacts) -> Step:
    limit = facts.max_message_bytes
    kind = draw(st.sampled_from(["noise", "audio", "empty", "at-limit", "over-limit", "way-over"]))
    refused = bad("binary_not_allowed", echo="optional")
    too_big = bad("message_too_big", echo="optional", closes=(CLOSE_TOO_BIG,))
    if kind == "noise":
        body, verdict = Binary(draw(st.integers(1, 64))), refused
    elif kind == "audio":
        body, verdict = Binary(8 + 320, "audio"), refused
    elif kind == "empty":
        body, verdict = Binary(0), refused
    elif kind == "at-limit":
        body, verdict = Binary(limit, "zeros"), refused
    elif kind == "over-limit":
        body, verdict = Binary(limit + 1, "zeros"), too_big
    else:
        body = Binary(facts.transport_max_bytes + 16, "zeros")
        verdict = maybe("message_too_big", echo="optional", closes=PAST_TRANSPORT_CLOSES)
    return Step(f"binary.{kind}", (ProbeSpec(body, f"binary.{kind}", verdict),))


_DEEP_LEVEL_BYTES = {
    "array": 2,
    "object": 6,
    "mixed": 8,
    "unknown-field": 2,
    "text": 2,
    "embedding": 2,
    "config-field": 2,
    "input-text": 2,
}


def _deep_verdict(facts: ServerFacts, shape: str, depth: int, *, compat: bool) -> Verdict:
    size = depth * _DEEP_LEVEL_BYTES[shape] + 160
    # A depth limit may reasonably end the session as a policy violation.
    closes = (CLOSE_POLICY, CLOSE_TOO_BIG)
    if size > facts.transport_max_bytes:
        return maybe("message_too_big", "error", echo="optional", closes=PAST_TRANSPORT_CLOSES)
    if size > facts.max_message_bytes and not compat:
        return bad("message_too_big", echo="optional", closes=(CLOSE_TOO_BIG,))
    if shape == "unknown-field":
        return maybe("invalid_json", "invalid_field", echo="optional", closes=closes)
    if compat and shape == "config-field":
        return maybe("error", echo="optional", closes=closes)
    return bad(
        "invalid_json", "unknown_type", "invalid_field", "error", echo="optional", closes=closes
    )


@st.composite
def _deep(draw: st.DrawFn, facts: ServerFacts, compat: bool = False) -> Step:
    shapes = (
        ["array", "object", "mixed", "config-field", "input-text"]
        if compat
        else ["array", "object", "mixed", "unknown-field", "text", "embedding"]
    )
    shape = draw(st.sampled_from(shapes))
    per = _DEEP_LEVEL_BYTES[shape]
    depth = draw(
        st.sampled_from(
            [
                1000,
                5000,
                max(64, (facts.max_message_bytes - 256) // per),
                (facts.max_message_bytes + 256) // per,
                100_000,
            ]
        )
    )
    verdict = _deep_verdict(facts, shape, depth, compat=compat)
    probes = [ProbeSpec(Deep(shape, depth), f"deep.{shape}", verdict)]
    if shape in ("text", "embedding"):
        probes += _cleanup(Cid("a"))
    return Step(f"deep.{shape}", tuple(probes))


@st.composite
def _oversize(draw: st.DrawFn, facts: ServerFacts) -> Step:
    limit = facts.max_message_bytes
    template = _append("a", "")
    kind = draw(
        st.sampled_from(["just-over", "exact", "multibyte-over", "multibyte-exact", "way-over"])
    )
    too_big = bad("message_too_big", echo="optional", closes=(CLOSE_TOO_BIG,))
    if kind == "just-over":
        body, verdict = Sized(template, "text", limit + draw(st.integers(1, 8))), too_big
    elif kind == "multibyte-over":
        body, verdict = Sized(template, "text", limit + 1, "\u00e9"), too_big
    elif kind == "way-over":
        body = Sized(template, "text", facts.transport_max_bytes + 16)
        verdict = maybe("message_too_big", echo="optional", closes=PAST_TRANSPORT_CLOSES)
    else:
        unit = "x" if kind == "exact" else "\u20ac"
        chars = (limit - 120) // len(unit.encode())
        body = Sized(template, "text", limit, unit)
        verdict = bad("text_too_long") if chars > facts.max_text_chars else OK
    probes = [ProbeSpec(body, f"oversize.{kind}", verdict), *_cleanup(Cid("a"))]
    return Step(f"oversize.{kind}", tuple(probes))


_NATIVE_STEPS: tuple[tuple[Callable[[ServerFacts], st.SearchStrategy[Step]], int], ...] = (
    (_single, 14),
    (_burst, 3),
    (_too_many, 1),
    (_after_end, 2),
    (_ghosts, 1),
    (_recreate, 2),
    (_implicit, 1),
    (_too_long, 1),
    (_update_extremes, 2),
    (_close_then_more, 1),
    (_cancel_played, 1),
    (_hostile_text, 2),
    (_long_event_id, 1),
    (_garbage, 2),
    (_binary_step, 1),
    (_deep, 1),
    (_oversize, 1),
)


def native_step(facts: ServerFacts) -> st.SearchStrategy[Step]:
    builders = [build for build, weight in _NATIVE_STEPS for _ in range(weight)]
    return st.sampled_from(builders).flatmap(lambda build: build(facts))


# --- the vllm-omni socket (/v1/audio/speech/stream) ------------------------------------
# Its errors carry only a text, so verdicts there just say whether an error is owed
# ("must"), may come (codes == {"error"}), or must not come.

_ERROR = frozenset({"error"})


def _compat(verdict: Verdict) -> Verdict:
    codes = _ERROR if (verdict.codes or verdict.must) else frozenset()
    return Verdict(codes, verdict.must, "optional", verdict.closes)


@functools.cache
def _compat_config_fields(facts: ServerFacts) -> dict[str, st.SearchStrategy[Variant]]:
    strings = functools.partial(_strings, facts)

    def language(text: str) -> Verdict:
        if text in facts.languages or text.lower() == "auto":
            return OK
        if text == "":
            return maybe("error")
        return bad("error")

    bool_optional, bool_required = _sample(_BOOL_OPTIONAL), _sample(_BOOL_REQUIRED)
    return {
        "model": strings(lambda s: OK if s == facts.model else bad("error")),
        "voice": strings(lambda s: OK if s in facts.voices else bad("error")),
        "speaker": strings(lambda s: OK if s in facts.voices else bad("error")),
        "task_type": _enum(("CustomVoice", "VoiceDesign", "Base")),
        "language": strings(language),
        "instructions": strings(_free_text),
        "response_format": _enum(("wav", "pcm", "flac", "mp3", "opus"), nullable=False),
        "speed": _number("float", 0.25, 4.0),
        "max_new_tokens": _number("int", 1, INT64_MAX),
        "initial_codec_chunk_frames": _number("int", 0, INT64_MAX),
        "non_streaming_mode": bool_optional,
        "ref_audio": strings(lambda s: maybe("error")),
        "ref_text": strings(_free_text),
        "x_vector_only_mode": bool_optional,
        "speaker_embedding": _embedding(facts, cap=True),
        "stream_audio": bool_required,
        "word_timestamps": _sample(
            [
                ("true", True, bad("error")),  # not available on this server: refused by name
                *[v for v in _BOOL_REQUIRED if v[0] != "true"],
            ]
        ),
        "seed": _number("int", -(2**63), INT64_MAX),
        "split_granularity": _enum(("none", "sentence", "clause"), nullable=False),
    }


_COMPAT_SETUP: dict[str, Any] = {"type": "session.config", "response_format": "pcm"}


def _compat_done() -> ProbeSpec:
    return ProbeSpec(Json({"type": "input.done"}), "input.done", OK)


@st.composite
def _compat_config(draw: st.DrawFn, facts: ServerFacts) -> Step:
    fields = _compat_config_fields(facts)
    target = draw(st.sampled_from([*fields, "type", "extra", "mangle", "stream-mp3", "valid"]))
    msg: dict[str, Any] = dict(_COMPAT_SETUP)
    label, verdict = "valid", OK
    body: Body | None = None
    if target in fields:
        label, value, verdict = draw(fields[target])
        msg[target] = value
    elif target == "type":
        label, value, verdict = draw(_sample(_types("session.config", vllm=True)))
        msg["type"] = value
    elif target == "extra":
        label, (key, value), verdict = draw(_sample(_extras(facts)))
        msg[key] = value
    elif target == "stream-mp3":
        msg.update(stream_audio=True, response_format=draw(st.sampled_from(["mp3", "flac"])))
        verdict = bad("error")
    elif target == "mangle":
        how = draw(st.sampled_from(["truncate", "trail", "lead", "quotes", "comma"]))
        label, verdict = how, bad("error")
        body = Mangled(msg, how, draw(st.integers(1, 999)))
    probes = [
        ProbeSpec(body or Json(msg), f"stream.session.config.{target}={label}", _compat(verdict))
    ]
    if draw(st.booleans()):
        probes.append(
            ProbeSpec(Json({"type": "input.text", "text": "Configured. "}), "input.text", OK)
        )
    return Step(f"stream.session.config.{target}", tuple(probes))


@st.composite
def _compat_text(draw: st.DrawFn, facts: ServerFacts) -> Step:
    def judge(text: str) -> Verdict:
        return _compat(_text_verdict(facts, text))

    label, value, verdict = draw(
        st.one_of(
            _strings(facts, judge, required=True),
            st.just(("missing", MISSING, OK)),
            _sample(
                [
                    ("sentences", "First one. Second one! Third?", OK),
                    ("clauses", "When it rains, it pours; and then, slowly, it stops", OK),
                ]
            ),
        )
    )
    probes = [
        ProbeSpec(
            Json({"type": "input.text", "text": value}),
            f"stream.input.text={label}",
            _compat(verdict),
        )
    ]
    if draw(st.booleans()):
        probes.append(
            ProbeSpec(Json({"type": "input.text", "text": " And a tail."}), "input.text", OK)
        )
    return Step("stream.input.text", tuple(probes))


def _compat_config_mid_utterance(facts: ServerFacts) -> st.SearchStrategy[Step]:
    probes = (
        ProbeSpec(Json({"type": "input.text", "text": "Half a sentence"}), "input.text", OK),
        ProbeSpec(Json(dict(_COMPAT_SETUP)), "stream.session.config.mid-utterance", bad("error")),
    )
    return st.just(Step("stream.config-mid-utterance", probes))


@st.composite
def _compat_garbage(draw: st.DrawFn, facts: ServerFacts) -> Step:
    refused = bad("error", echo="optional")
    kind = draw(
        st.sampled_from(
            [
                "random-text",
                "non-object",
                "unknown-type",
                "input.text-wrong-type",
                "binary",
                "empty",
            ]
        )
    )
    if kind == "random-text":
        body: Body = Verbatim(draw(st.text(max_size=64)))
    elif kind == "non-object":
        body = Verbatim(draw(st.sampled_from(_NON_OBJECTS)))
    elif kind == "unknown-type":
        body = Json(
            {"type": draw(st.sampled_from(["context.create", "", "input.TEXT", "session.update"]))}
        )
    elif kind == "input.text-wrong-type":
        body = Json(
            {"type": "input.text", "text": draw(st.sampled_from([5, None, ["a"], {"t": 1}, True]))}
        )
    elif kind == "binary":
        body = Binary(draw(st.integers(0, 64)))
    else:
        body = Verbatim("")
    return Step(f"stream.garbage.{kind}", (ProbeSpec(body, f"stream.garbage.{kind}", refused),))


@st.composite
def _compat_oversize(draw: st.DrawFn, facts: ServerFacts) -> Step:
    template: dict[str, Any] = {"type": "input.text", "text": ""}
    if draw(st.booleans()):
        # This endpoint has no message limit of its own: a long text is text_too_long.
        total = facts.max_message_bytes + draw(st.integers(1, 8))
        verdict = bad("error") if total - 40 > facts.max_text_chars else OK
        return Step(
            "stream.oversize.just-over",
            (ProbeSpec(Sized(template, "text", total), "stream.oversize.just-over", verdict),),
        )
    body = Sized(template, "text", facts.transport_max_bytes + 16)
    verdict = maybe("error", echo="optional", closes=PAST_TRANSPORT_CLOSES)
    return Step("stream.oversize.way-over", (ProbeSpec(body, "stream.oversize.way-over", verdict),))


@st.composite
def _compat_close(draw: st.DrawFn, facts: ServerFacts) -> Step:
    probes = []
    if draw(st.booleans()):
        probes.append(
            ProbeSpec(Json({"type": "input.text", "text": "Last words."}), "input.text", OK)
        )
        probes.append(_compat_done())
    # Everything after session.close is ignored, and the socket closes with 1000.
    closing = maybe(closes=(CLOSE_NORMAL,))
    probes.append(ProbeSpec(Json({"type": "session.close"}), "stream.session.close", closing))
    for text in draw(
        st.lists(
            st.sampled_from(["{bad", '{"type":"input.text","text":"late"}', '{"type":"no"}']),
            max_size=3,
        )
    ):
        probes.append(ProbeSpec(Verbatim(text), "stream.after-close", closing))
    return Step("stream.close-then-more", tuple(probes))


@st.composite
def _compat_fresh(draw: st.DrawFn, facts: ServerFacts) -> Step:
    """Before the first session.config, anything else is an error and the socket closes."""
    first = maybe("error", echo="optional", closes=(CLOSE_POLICY,)) | bad("error")
    kind = draw(
        st.sampled_from(
            ["input.text", "input.done", "session.close", "garbage", "binary", "bad-config"]
        )
    )
    if kind == "input.text":
        body: Body = Json({"type": "input.text", "text": "too early"})
    elif kind in ("input.done", "session.close"):
        body = Json({"type": kind})
    elif kind == "garbage":
        body = Verbatim(draw(st.sampled_from(["{", "[]", "null", '{"type":5}'])))
    elif kind == "binary":
        body = Binary(16)
    else:
        body = Json({"type": "session.config", "speed": draw(st.sampled_from([0, -1, 99, "fast"]))})
    return Step(
        f"stream.first-message.{kind}",
        (ProbeSpec(body, f"stream.first-message.{kind}", first),),
        fresh=True,
    )


_COMPAT_STEPS: tuple[tuple[Callable[..., st.SearchStrategy[Step]], int], ...] = (
    (_compat_config, 8),
    (_compat_text, 4),
    (_compat_config_mid_utterance, 1),
    (_compat_garbage, 2),
    (functools.partial(_deep, compat=True), 1),
    (_compat_oversize, 1),
    (_compat_close, 1),
    (_compat_fresh, 1),
)


def compat_step(facts: ServerFacts) -> st.SearchStrategy[Step]:
    builders = [build for build, weight in _COMPAT_STEPS for _ in range(weight)]
    return st.sampled_from(builders).flatmap(lambda build: build(facts))


def plans(facts: ServerFacts, config: FuzzConfig) -> st.SearchStrategy[Plan]:
    native = st.lists(native_step(facts), min_size=config.steps, max_size=config.steps).map(tuple)
    compat = st.lists(
        compat_step(facts), min_size=config.compat_steps, max_size=config.compat_steps
    ).map(tuple)
    return st.builds(
        Plan,
        st.tuples(*[native] * config.native_sessions),
        st.tuples(*[compat] * config.compat_sessions),
    )


@dataclass(frozen=True)
class FuzzConfig:
    examples: int = 6
    """Hypothesis examples; each is one barrage (all sessions at once)."""
    native_sessions: int = 3
    compat_sessions: int = 1
    steps: int = 30
    """Steps per native fuzz session in one barrage."""
    compat_steps: int = 15
    seed: int | None = None
    """None: derandomized (the same plans on every run)."""
    replay_budget: int = 80
    """Fresh-connection replays allowed for minimizing findings."""
    spin_window_s: float = 1.0
    cpu_seconds: Callable[[], float] | None = None
    """Cumulative CPU seconds of the server process, for the busy-loop check."""


# --- findings and the report ---------------------------------------------------------

ERROR_FRAME_MAX = 8192
"""An error frame larger than this echoes client input back wholesale (amplification)."""


@dataclass
class Finding:
    """One oracle violation. ``signature`` is what a replay must show again to count
    as reproducing it; ``repro`` is the smallest message sequence that did."""

    endpoint: str
    kind: str
    label: str
    detail: str
    signature: str
    frames: list[str] = field(default_factory=list)
    repro: list[str] | None = None
    repro_note: str = ""
    culprit: str = ""
    """The label of the one message that reproduces it alone, when one does."""
    count: int = 1
    step: Step | None = field(default=None, repr=False)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.endpoint, self.kind, self.label)

    def to_json(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "kind": self.kind,
            "label": self.label,
            "detail": self.detail,
            "count": self.count,
            "repro": self.repro if self.repro is not None else self.frames,
            "minimized": self.repro is not None,
            "repro_note": self.repro_note,
            "culprit": self.culprit,
        }


INPUT_KINDS = (
    "missing_error",
    "unexpected_error",
    "unknown_event_id",
    "echo_too_long",
    "oversized_error",
    "internal_error",
    "no_answer",
)
CLOSE_KINDS = ("unexpected_close",)
ORDERING_KINDS = ("ordering",)
BYSTANDER_KINDS = ("bystander_audio", "bystander_error")
SERVER_KINDS = ("server_dead", "fresh_session", "connect_failed")
SPIN_KINDS = ("busy_loop",)


@dataclass
class FuzzReport:
    sent: Counter[str] = field(default_factory=Counter)
    """Fuzz messages sent, by endpoint ("ws", "stream")."""
    barriers: int = 0
    replayed: int = 0
    examples: int = 0
    families: Counter[str] = field(default_factory=Counter)
    errors_by_code: Counter[str] = field(default_factory=Counter)
    closes_by_code: Counter[str] = field(default_factory=Counter)
    findings: dict[tuple[str, str, str], Finding] = field(default_factory=dict)
    bystander: dict[str, Any] = field(default_factory=lambda: {"rounds": 0, "identical": 0})
    server_alive: bool | None = None
    busy_loop: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    timings: Counter[str] = field(default_factory=Counter)
    """Seconds spent per phase: prepare, barrage, minimize, finish."""

    @property
    def messages(self) -> int:
        return sum(self.sent.values())

    def add(self, finding: Finding) -> bool:
        """Record a finding; True when it is the first of its key."""
        known = self.findings.get(finding.key)
        if known is not None:
            known.count += 1
            return False
        self.findings[finding.key] = finding
        return True

    def of_kind(self, *kinds: str) -> list[Finding]:
        return [f for f in self.findings.values() if f.kind in kinds]

    def summary(self) -> dict[str, Any]:
        return {
            "messages_sent": self.messages,
            "messages_by_endpoint": dict(self.sent),
            "barrier_messages": self.barriers,
            "replay_messages": self.replayed,
            "examples": self.examples,
            "errors_by_code": dict(sorted(self.errors_by_code.items())),
            "closes_by_code": dict(sorted(self.closes_by_code.items())),
            "server_alive": self.server_alive,
            "bystander": self.bystander,
            "busy_loop": self.busy_loop,
            "families": dict(sorted(self.families.items())),
            "findings": [f.to_json() for f in sorted(self.findings.values(), key=_finding_order)],
            "duration_s": round(self.duration_s, 2),
            "timings_s": {k: round(v, 2) for k, v in self.timings.items()},
        }

    def describe(self, findings: Iterable[Finding] | None = None) -> str:
        chosen = sorted(
            self.findings.values() if findings is None else findings, key=_finding_order
        )
        lines = [
            f"{len(chosen)} distinct finding(s) after {self.messages} fuzz messages "
            f"({dict(self.sent)}), server alive: {self.server_alive}"
        ]
        for f in chosen:
            culprit = f" <- {f.culprit}" if f.culprit and f.culprit != f.label else ""
            lines.append(f"- [{f.endpoint}] {f.kind} @ {f.label}{culprit} (x{f.count}): {f.detail}")
            frames = f.repro if f.repro is not None else f.frames
            note = "minimal repro" if f.repro is not None else "as sent"
            if f.repro_note:
                note += f"; {f.repro_note}"
            if frames:
                lines.append(f"    {note}:")
                lines += [f"      {frame}" for frame in frames[:12]]
                if len(frames) > 12:
                    lines.append(f"      ... {len(frames) - 12} more")
        return "\n".join(lines)


def _finding_order(f: Finding) -> tuple[str, str, str]:
    return (f.kind, f.endpoint, f.label)


# --- ordering oracles ------------------------------------------------------------------


class _ContextOrder:
    """Oracle 4 for one native connection, fed every frame in arrival order."""

    def __init__(self, keep_audio: bool = False) -> None:
        self.live: dict[str, int] = {}
        self.owner: dict[int, str] = {}
        self.next_seq: dict[int, int] = {}
        self.final: set[int] = set()
        self.ended_early: set[str] = set()
        self.zombies: dict[str, int] = {}
        """Contexts announced after their own end was reported: already counted as a
        problem, so nothing more about them is (context id -> stream)."""
        self.keep_audio = keep_audio
        self.audio: dict[str, bytearray] = {}
        self.problems: list[tuple[str, str, str | None]] = []

    def _problem(self, what: str, detail: str, context_id: str | None) -> None:
        self.problems.append((what, detail, context_id))

    def message(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        cid = msg.get("context_id")
        if kind == "context.created":
            stream = msg.get("stream")
            if not isinstance(cid, str) or not isinstance(stream, int):
                self._problem("malformed context.created", json.dumps(msg)[:200], None)
                return
            if cid in self.ended_early:
                self.ended_early.discard(cid)
                self.zombies[cid] = stream
                return
            self.zombies.pop(cid, None)
            if cid in self.live:
                self._problem("context.created twice", f"{cid!r} announced again while live", cid)
            elif stream in self.owner:
                self._problem(
                    "stream reused before its context ended",
                    f"stream {stream} announced for {cid!r} while {self.owner[stream]!r} "
                    "had not been seen to end",
                    cid,
                )
            self.live[cid] = stream
            self.owner[stream] = cid
            self.next_seq[stream] = 0
            self.final.discard(stream)
        elif kind in ("context.done", "context.cancelled"):
            # A zombie got its end already: this one is about a new context of that id.
            if isinstance(cid, str):
                self.zombies.pop(cid, None)
            if not isinstance(cid, str) or cid not in self.live:
                self._problem(
                    f"{kind} before context.created", f"{kind} for {cid!r}, not live", cid
                )
                if isinstance(cid, str):
                    self.ended_early.add(cid)
                return
            stream = self.live.pop(cid)
            self.owner.pop(stream, None)
        elif isinstance(cid, str) and cid in self.zombies:
            return
        elif kind in ("context.flushed", "timestamps", "audio") or (
            kind == "warning" and cid is not None
        ):
            if cid not in self.live:
                self._problem(
                    f"{kind} before context.created", f"{kind} for {cid!r}, not live", cid
                )
            elif kind == "audio" and self.keep_audio:
                self.audio.setdefault(cid, bytearray()).extend(
                    base64.b64decode(msg.get("audio", ""))
                )

    def frame(self, data: bytes) -> None:
        if len(data) < 8:
            self._problem("short audio frame", f"{len(data)} bytes", None)
            return
        version, flags, stream, seq = struct.unpack_from("<BBHI", data)
        if version != 1:
            self._problem("audio frame of another version", f"version {version}", None)
        cid = self.owner.get(stream)
        if cid is None and stream in self.zombies.values():
            return
        if cid is None:
            self._problem(
                "audio for a stream no live context owns", f"stream {stream} seq {seq}", None
            )
            return
        if stream in self.final:
            self._problem("audio after the context's last frame", f"stream {stream} seq {seq}", cid)
        if seq != self.next_seq[stream]:
            self._problem(
                "seq out of order",
                f"stream {stream}: seq {seq}, expected {self.next_seq[stream]}",
                cid,
            )
        self.next_seq[stream] = seq + 1
        if flags & 2:
            self.final.add(stream)
        if self.keep_audio:
            self.audio.setdefault(cid, bytearray()).extend(data[8:])


class _SentenceOrder:
    """The vllm-omni socket's order: audio.start, audio, audio.done; session.done after."""

    def __init__(self) -> None:
        self.current: tuple[Any, Any] | None = None
        self.next_utterance = 0
        self.problems: list[tuple[str, str, str | None]] = []

    def message(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        index = (msg.get("utterance_index"), msg.get("sentence_index"))
        if kind == "audio.start":
            if self.current is not None:
                self.problems.append(
                    ("audio.start inside another sentence", f"{index} inside {self.current}", None)
                )
            if index[0] != self.next_utterance:
                self.problems.append(
                    (
                        "audio.start of the wrong utterance",
                        f"{index}, open utterance {self.next_utterance}",
                        None,
                    )
                )
            self.current = index
        elif kind == "audio.done":
            if self.current != index:
                self.problems.append(
                    ("audio.done without its audio.start", f"{index}, open {self.current}", None)
                )
            self.current = None
        elif kind == "session.done":
            if self.current is not None:
                self.problems.append(
                    ("session.done inside a sentence", f"inside {self.current}", None)
                )
            if index[0] != self.next_utterance:
                self.problems.append(
                    (
                        "session.done out of order",
                        f"utterance {index[0]}, expected {self.next_utterance}",
                        None,
                    )
                )
            self.next_utterance = (
                index[0] if isinstance(index[0], int) else self.next_utterance
            ) + 1

    def frame(self, data: bytes) -> None:
        if self.current is None:
            self.problems.append(
                ("binary audio outside audio.start .. audio.done", f"{len(data)} bytes", None)
            )


# --- connections -----------------------------------------------------------------------


async def _connect(url: str) -> Any:
    return await websockets.connect(
        url,
        max_size=None,
        compression=None,
        open_timeout=CONNECT_TIMEOUT_S,
        close_timeout=5,
        ping_interval=None,
    )


class _Conn:
    """What both endpoints share: a reader task, a close code, step bookkeeping."""

    endpoint = ""

    def __init__(self, run: _Run, ws: Any, name: str) -> None:
        self.run = run
        self.ws = ws
        self.name = name
        self.errors: list[tuple[dict[str, Any], int]] = []
        self.closed = asyncio.Event()
        self.close_code: int | None = None
        self.close_reason = ""
        self.allow_idle_close = False
        self.sent_close = False
        self.counting = True
        self.order: _ContextOrder | _SentenceOrder = self._make_order()
        self.steps_by_prefix: dict[str, tuple[Step, list[str]]] = {}
        self.progress = asyncio.Event()
        """Set on every frame received (and on close): wakes up :meth:`_wait`."""
        self.session_close_sent = False
        self.close_judged = False
        self.last: tuple[Step, list[Rendered]] | None = None
        self.reader = asyncio.create_task(self._read())

    def _make_order(self) -> _ContextOrder | _SentenceOrder:
        raise NotImplementedError

    def _on_message(self, msg: dict[str, Any]) -> None:
        raise NotImplementedError

    async def play(self, step: Step, index: int) -> list[Finding]:
        """Send the step, wait for its answers, and judge them."""
        raise NotImplementedError

    async def _read(self) -> None:
        try:
            async for data in self.ws:
                self.progress.set()
                if isinstance(data, bytes):
                    self.order.frame(data)
                    continue
                try:
                    msg = json.loads(data)
                except ValueError:
                    msg = None
                if not isinstance(msg, dict):
                    self.order.problems.append(
                        ("server sent a text frame that is not a JSON object", data[:120], None)
                    )
                    continue
                if msg.get("type") == "error":
                    self.errors.append((msg, len(data.encode("utf-8", "surrogatepass"))))
                    if self.counting:
                        self.run.report.errors_by_code[str(msg.get("code", "vllm-error"))] += 1
                self.order.message(msg)
                self._on_message(msg)
        except websockets.ConnectionClosed:
            pass
        finally:
            code = self.ws.close_code
            self.close_code = CLOSE_ABNORMAL if code is None else int(code)
            self.close_reason = self.ws.close_reason or ""
            if self.counting:
                self.run.report.closes_by_code[str(self.close_code)] += 1
            self.closed.set()
            self.progress.set()
            self._on_closed()

    def _on_closed(self) -> None:
        pass

    async def _wait(self, ready: Callable[[], bool], timeout: float = BARRIER_TIMEOUT_S) -> bool:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.closed.is_set():
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.progress.clear()
            try:
                await asyncio.wait_for(self.progress.wait(), left)
            except TimeoutError:
                return False
        return True

    async def wait_closed(self, timeout: float = 10.0) -> None:
        """Until the reader has seen the close (a failed send can come first)."""
        try:
            await asyncio.wait_for(self.closed.wait(), timeout)
        except TimeoutError:
            pass

    async def close(self) -> None:
        if not self.closed.is_set():
            self.sent_close = True
            try:
                await asyncio.wait_for(self.ws.close(), 10)
            except (TimeoutError, OSError, websockets.WebSocketException):
                pass
        try:
            await asyncio.wait_for(self.reader, 10)
        except TimeoutError:
            self.reader.cancel()

    async def _send_all(self, step: Step, index: int) -> list[Rendered]:
        prefix = f"{self.name}.{index}-"
        rendered: list[Rendered] = []
        for spec in step.probes:
            if self.closed.is_set():
                break
            r = _Renderer(self.run.next_event_id(), prefix).render(spec)
            rendered.append(r)
            try:
                await self.ws.send(r.frame)
            except websockets.ConnectionClosed:
                # It may be what closed the socket (a frame past the transport cap).
                await self.wait_closed()
                break
            if CLOSE_IDLE in spec.verdict.closes:
                self.allow_idle_close = True
            if CLOSE_NORMAL in spec.verdict.closes:
                self.session_close_sent = True
        self.steps_by_prefix[prefix] = (step, [show(r.frame) for r in rendered])
        self.last = (step, rendered)
        if self.counting:
            self.run.report.sent[self.endpoint] += len(rendered)
            self.run.report.families[step.family] += 1
        else:
            self.run.report.replayed += len(rendered)
        return rendered

    def _finding(
        self,
        step: Step,
        rendered: Sequence[Rendered],
        kind: str,
        label: str,
        detail: str,
        signature: str,
    ) -> Finding:
        frames = [show(r.frame) for r in rendered]
        return Finding(self.endpoint, kind, label, detail, signature, frames, step=step)

    def _judge_close(self, step: Step, rendered: Sequence[Rendered], out: list[Finding]) -> int:
        """Check a close during the step; the index of the first message it exempts."""
        if not self.closed.is_set() or self.sent_close:
            return len(rendered)
        self.close_judged = True
        code = self.close_code
        for i, r in enumerate(rendered):
            if code in r.spec.verdict.closes:
                return i
        if code == CLOSE_IDLE and self.allow_idle_close:
            return 0
        if code == CLOSE_NORMAL and self.session_close_sent:
            return 0
        label = step.family
        what = (
            "the server crashed on input"
            if code == CLOSE_INTERNAL
            else "no message of the step explains it"
        )
        out.append(
            self._finding(
                step,
                rendered,
                "unexpected_close",
                label,
                f"socket closed with {code} ({self.close_reason or 'no reason'}): {what}",
                f"close:{code}",
            )
        )
        return 0

    def _origin(self, context_id: Any) -> tuple[Step, list[str]] | None:
        """The step (and its frames as sent) whose context ids include ``context_id``."""
        if not isinstance(context_id, str):
            return None
        for prefix, origin in self.steps_by_prefix.items():
            if context_id.startswith(prefix):
                return origin
        return None

    def _ordering(
        self, step: Step, rendered: Sequence[Rendered], start: int, out: list[Finding]
    ) -> None:
        frames = [show(r.frame) for r in rendered]
        for what, detail, cid in self.order.problems[start:]:
            origin = self._origin(cid) or (step, frames)
            out.append(
                Finding(
                    self.endpoint,
                    "ordering",
                    what,
                    f"{detail} (in a {origin[0].family} step)",
                    f"ordering:{what}",
                    origin[1],
                    step=origin[0],
                )
            )

    def judge_idle_close(self) -> list[Finding]:
        """A close that came between steps: an idle timeout, or the end of session.close."""
        if self.sent_close or self.close_judged or self.close_code is None or self.last is None:
            return []
        if self.close_code == CLOSE_NORMAL and self.session_close_sent:
            return []
        if self.close_code == CLOSE_IDLE and self.allow_idle_close:
            return []
        step, rendered = self.last
        out: list[Finding] = []
        self._judge_close(step, [], out)
        for f in out:
            f.frames = [show(r.frame) for r in rendered]
            f.detail += " (after the step's barrier was answered)"
        return out


class _NativeConn(_Conn):
    endpoint = "ws"

    def __init__(self, run: _Run, ws: Any, name: str) -> None:
        self.barrier_id: str | None = None
        self.barrier: asyncio.Future[dict[str, Any] | None] | None = None
        super().__init__(run, ws, name)

    @classmethod
    async def open(cls, run: _Run, name: str) -> _NativeConn:
        ws = await _connect(run.facts.ws_url)
        created = json.loads(await asyncio.wait_for(ws.recv(), CONNECT_TIMEOUT_S))
        if created.get("type") != "session.created":
            raise RuntimeError(f"first message was not session.created: {created}")
        return cls(run, ws, name)

    def _make_order(self) -> _ContextOrder:
        return _ContextOrder()

    def _on_message(self, msg: dict[str, Any]) -> None:
        barrier = self.barrier
        answers = msg.get("event_id") == self.barrier_id and msg.get("type") in (
            "session.updated",
            "error",
        )
        if barrier is not None and not barrier.done() and answers:
            barrier.set_result(msg)

    def _on_closed(self) -> None:
        if self.barrier is not None and not self.barrier.done():
            self.barrier.set_result(None)

    async def play(self, step: Step, index: int) -> list[Finding]:
        errors_from, problems_from = len(self.errors), len(self.order.problems)
        rendered = await self._send_all(step, index)
        answer = await self._barrier()
        out: list[Finding] = []
        if answer is not None and answer.get("code") == "session_closing":
            # session.close was taken: the socket closes (1000) once its contexts end.
            await self.wait_closed(BARRIER_TIMEOUT_S)
            if not self.closed.is_set():
                out.append(
                    self._finding(
                        step,
                        rendered,
                        "no_answer",
                        step.family,
                        f"session.close was taken but the socket stayed open for {BARRIER_TIMEOUT_S:g} s",
                        "no_close",
                    )
                )
        prefix = f"{self.name}.{index}-"
        if step.settle and answer is not None:
            settled = await self._wait(
                lambda: not any(c.startswith(prefix) for c in self.order.live)
            )
            if not settled and not self.closed.is_set():
                out.append(
                    self._finding(
                        step,
                        rendered,
                        "no_answer",
                        step.family,
                        f"a context of the step did not end within {BARRIER_TIMEOUT_S:g} s",
                        "no_end",
                    )
                )
        exempt_from = self._judge_close(step, rendered, out)
        if answer is None and not self.closed.is_set():
            out.append(
                self._finding(
                    step,
                    rendered,
                    "no_answer",
                    step.family,
                    f"no answer to the barrier after the step within {BARRIER_TIMEOUT_S:g} s",
                    "no_answer",
                )
            )
        self._judge_errors(step, rendered, self.errors[errors_from:], exempt_from, out)
        self._ordering(step, rendered, problems_from, out)
        return out

    async def _barrier(self) -> dict[str, Any] | None:
        """Send the barrier; its answer (None: none came, or the socket closed)."""
        if self.closed.is_set():
            return None
        self.barrier_id = f"b-{self.run.next_event_id()}"
        self.barrier = asyncio.get_running_loop().create_future()
        try:
            await self.ws.send(json.dumps({"type": "session.update", "event_id": self.barrier_id}))
        except websockets.ConnectionClosed:
            await self.wait_closed()
            return None
        if self.counting:
            self.run.report.barriers += 1
        try:
            return await asyncio.wait_for(self.barrier, BARRIER_TIMEOUT_S)
        except TimeoutError:
            return None

    def _match(
        self, event_id: Any, by_id: dict[str, tuple[int, Rendered]]
    ) -> tuple[int, Rendered] | None:
        if not isinstance(event_id, str):
            return None
        if event_id in by_id:
            return by_id[event_id]
        # A server may cut a long id short; the cut must still be a prefix of it.
        base = event_id.split("~", 1)[0]
        for sent_id, hit in by_id.items():
            if "~" in sent_id and sent_id.split("~", 1)[0] == base and sent_id.startswith(event_id):
                return hit
        return None

    def _judge_errors(
        self,
        step: Step,
        rendered: Sequence[Rendered],
        errors: Sequence[tuple[dict[str, Any], int]],
        exempt_from: int,
        out: list[Finding],
    ) -> None:
        by_id = {r.event_id: (i, r) for i, r in enumerate(rendered) if r.event_id}
        answered: set[int] = set()

        def add(kind: str, label: str, detail: str, signature: str) -> None:
            out.append(self._finding(step, rendered, kind, label, detail, signature))

        for msg, size in errors:
            code = str(msg.get("code"))
            event_id = msg.get("event_id")
            text = str(msg.get("message", ""))[:160]
            hit = self._match(event_id, by_id)
            label = hit[1].spec.label if hit else step.family
            if size > ERROR_FRAME_MAX:
                add(
                    "oversized_error",
                    f"{code} error",
                    f"a {size}-byte error frame ({code}) echoes client input",
                    "oversized_error",
                )
            if isinstance(event_id, str) and len(event_id) > ECHO_MAX:
                add(
                    "echo_too_long",
                    label,
                    f"error {code} echoes an event_id of {len(event_id)} characters",
                    "echo_too_long",
                )
            if code == "internal_error":
                origin = None if hit else self._origin(msg.get("context_id"))
                if origin is None:
                    add("internal_error", label, f"internal_error: {text!r}", "internal_error")
                else:
                    detail = (
                        f"internal_error: {text!r} (for a context of a {origin[0].family} step)"
                    )
                    out.append(
                        Finding(
                            self.endpoint,
                            "internal_error",
                            origin[0].family,
                            detail,
                            "internal_error",
                            origin[1],
                            step=origin[0],
                        )
                    )
            if event_id is not None and hit is None:
                if event_id == self.barrier_id:
                    if code != "session_closing":
                        add(
                            "unexpected_error",
                            "barrier (empty session.update)",
                            f"{code}: {text!r}",
                            f"unexpected_error:{code}",
                        )
                elif code != "internal_error":
                    add(
                        "unknown_event_id",
                        step.family,
                        f"error {code} echoes an event_id that was not sent: {str(event_id)[:60]!r}",
                        "unknown_event_id",
                    )
                continue
            if hit is None:
                hit = next(
                    (
                        (i, r)
                        for i, r in enumerate(rendered)
                        if i not in answered
                        and (r.event_id is None or r.spec.verdict.echo == "optional")
                        and code in r.spec.verdict.codes
                    ),
                    None,
                )
                context_id = msg.get("context_id")
                refusal = (
                    isinstance(context_id, str)
                    and context_id.startswith(f"{self.name}.")
                    and any(code in r.spec.verdict.codes for r in rendered)
                )
                if hit is None and refusal:
                    continue  # the model refused text of a context while speaking it
                if hit is None:
                    if code != "internal_error":
                        add(
                            "unexpected_error",
                            step.family,
                            f"{code} ({text!r}) fits no message of the step",
                            f"unexpected_error:{code}",
                        )
                    continue
            i, r = hit
            answered.add(i)
            if code not in r.spec.verdict.codes and code != "internal_error":
                fits = ", ".join(sorted(r.spec.verdict.codes)) or "no error at all"
                add(
                    "unexpected_error",
                    r.spec.label,
                    f"got {code} ({text!r}); fits: {fits}",
                    f"unexpected_error:{code}",
                )
        for i, r in enumerate(rendered[:exempt_from]):
            if r.spec.verdict.must and i not in answered:
                fits = ", ".join(sorted(r.spec.verdict.codes))
                add(
                    "missing_error",
                    r.spec.label,
                    f"no error for a message known to be invalid (fits: {fits})",
                    "missing_error",
                )


class _CompatConn(_Conn):
    endpoint = "stream"

    def __init__(self, run: _Run, ws: Any, name: str) -> None:
        self.session_done = 0
        self.acks_expected = 0
        super().__init__(run, ws, name)

    @classmethod
    async def open(cls, run: _Run, name: str, *, configure: bool) -> _CompatConn:
        conn = cls(run, await _connect(run.facts.compat_url), name)
        if configure:
            await conn.ws.send(json.dumps(_COMPAT_SETUP))
            if not await conn._barrier():
                raise RuntimeError(
                    f"the stream endpoint did not take a valid session.config (closed {conn.close_code})"
                )
        return conn

    def _make_order(self) -> _SentenceOrder:
        return _SentenceOrder()

    def _on_message(self, msg: dict[str, Any]) -> None:
        if msg.get("type") == "session.done":
            self.session_done += 1

    async def _barrier(self) -> bool:
        if self.closed.is_set():
            return False
        try:
            await self.ws.send(json.dumps({"type": "input.done"}))
        except websockets.ConnectionClosed:
            await self.wait_closed()
            return False
        if self.counting:
            self.run.report.barriers += 1
        self.acks_expected += 1
        return await self._wait(lambda: self.session_done >= self.acks_expected)

    async def play(self, step: Step, index: int) -> list[Finding]:
        errors_from, problems_from = len(self.errors), len(self.order.problems)
        rendered = await self._send_all(step, index)
        self.acks_expected += sum(1 for r in rendered if r.spec.label == "input.done")
        out: list[Finding] = []
        closing = any(CLOSE_NORMAL in r.spec.verdict.closes for r in rendered)
        if step.fresh:
            await self._wait(lambda: len(self.errors) > errors_from, 10.0)
            answered = True
        elif closing:
            answered = await self._wait(self.closed.is_set)
        else:
            answered = await self._barrier()
        exempt_from = self._judge_close(step, rendered, out)
        if not answered and not self.closed.is_set():
            out.append(
                self._finding(
                    step,
                    rendered,
                    "no_answer",
                    step.family,
                    f"no session.done for the barrier within {BARRIER_TIMEOUT_S:g} s",
                    "no_answer",
                )
            )
        self._judge_errors(step, rendered, self.errors[errors_from:], exempt_from, out)
        self._ordering(step, rendered, problems_from, out)
        return out

    def _judge_errors(
        self,
        step: Step,
        rendered: Sequence[Rendered],
        errors: Sequence[tuple[dict[str, Any], int]],
        exempt_from: int,
        out: list[Finding],
    ) -> None:
        def add(kind: str, label: str, detail: str, signature: str) -> None:
            out.append(self._finding(step, rendered, kind, label, detail, signature))

        owed = [r for r in rendered[:exempt_from] if r.spec.verdict.must]
        fit = [r for r in rendered if r.spec.verdict.codes]
        counted: list[str] = []
        for msg, size in errors:
            text = str(msg.get("message", ""))
            if size > ERROR_FRAME_MAX:
                add(
                    "oversized_error",
                    step.family,
                    f"a {size}-byte error frame echoes client input",
                    "oversized_error",
                )
            if text.startswith("Internal error") or ": internal_error:" in text:
                add("internal_error", step.family, text[:200], "internal_error")
            elif not text.startswith("Generation failed"):
                counted.append(text[:160])
        if len(counted) < len(owed):
            add(
                "missing_error",
                owed[0].spec.label if len(owed) == 1 else step.family,
                f"{len(counted)} error(s) for {len(owed)} message(s) known to be invalid",
                "missing_error",
            )
        if len(counted) > len(fit):
            culprits = [r for r in fit if not r.spec.verdict.must] or rendered
            add(
                "unexpected_error",
                culprits[0].spec.label if len(culprits) == 1 else step.family,
                f"{len(counted)} error(s) where at most {len(fit)} fit: {counted[-1]!r}",
                "unexpected_error",
            )


# --- the run ---------------------------------------------------------------------------


class _Run:
    def __init__(self, facts: ServerFacts, config: FuzzConfig, report: FuzzReport) -> None:
        self.facts = facts
        self.config = config
        self.report = report
        self._ids = itertools.count(1)
        self.reference: bytes | None = None
        self.budget = config.replay_budget
        self.to_minimize: list[Finding] = []
        self.stop_after: int | None = None
        """Skip the remaining barrages once this many fuzz messages were sent."""

    def next_event_id(self) -> str:
        return f"f-{next(self._ids)}"

    def record(self, findings: Iterable[Finding]) -> None:
        for finding in findings:
            if self.report.add(finding) and finding.step is not None:
                self.to_minimize.append(finding)

    # -- the bystander (oracle 3) --

    async def bystander_round(self, context_id: str) -> tuple[bytes | None, list[Finding]]:
        """The well-behaved session: one context, a fixed text streamed word by word."""
        findings: list[Finding] = []
        try:
            ws = await _connect(self.facts.ws_url)
        except (OSError, TimeoutError, websockets.WebSocketException) as exc:
            return None, [
                Finding(
                    "bystander",
                    "bystander_error",
                    "connect",
                    f"could not connect: {exc}",
                    "connect",
                )
            ]
        order = _ContextOrder(keep_audio=True)
        done = asyncio.Event()

        async def read() -> None:
            try:
                async for data in ws:
                    if isinstance(data, bytes):
                        order.frame(data)
                        continue
                    msg = json.loads(data)
                    order.message(msg)
                    if msg.get("type") == "error":
                        findings.append(
                            Finding(
                                "bystander",
                                "bystander_error",
                                msg.get("code", "?"),
                                json.dumps(msg)[:300],
                                "error",
                            )
                        )
                    if msg.get("context_id") == context_id and msg.get("type") in (
                        "context.done",
                        "context.cancelled",
                        "error",
                    ):
                        done.set()
            except websockets.ConnectionClosed:
                pass
            finally:
                done.set()

        reader = asyncio.create_task(read())
        try:
            create = {
                "type": "context.create",
                "context_id": context_id,
                "voice": self.facts.voices[0],
                "output_format": {
                    "encoding": "pcm_s16le",
                    "sample_rate": self.facts.bystander_rate,
                },
                "seed": 1234,
                "temperature": 0,
                "event_id": f"{context_id}-create",
            }
            await ws.send(json.dumps(create))
            words = BYSTANDER_TEXT.split(" ")
            for i, word in enumerate(words):
                piece = word if i == len(words) - 1 else word + " "
                await ws.send(
                    json.dumps({"type": "text.append", "context_id": context_id, "text": piece})
                )
                await asyncio.sleep(0.003)
            await ws.send(json.dumps({"type": "context.end", "context_id": context_id}))
            try:
                await asyncio.wait_for(done.wait(), 60)
            except TimeoutError:
                findings.append(
                    Finding(
                        "bystander",
                        "bystander_error",
                        "timeout",
                        "no context.done within 60 s",
                        "timeout",
                    )
                )
        except websockets.ConnectionClosed as exc:
            findings.append(
                Finding(
                    "bystander",
                    "bystander_error",
                    "closed",
                    f"the bystander's socket closed: {exc}",
                    "closed",
                )
            )
        finally:
            await ws.close()
            await reader
        for what, detail, _ in order.problems:
            findings.append(
                Finding("bystander", "ordering", f"bystander: {what}", detail, f"ordering:{what}")
            )
        return bytes(order.audio.get(context_id, b"")), findings

    def _compare(self, audio: bytes | None, when: str) -> Finding | None:
        if audio is None or self.reference is None or audio == self.reference:
            return None
        ref = self.reference
        detail = f"{when}: {len(audio)} bytes vs {len(ref)} on an idle server"
        if len(audio) == len(ref) and len(audio) % 2 == 0:
            a = struct.unpack(f"<{len(audio) // 2}h", audio)
            b = struct.unpack(f"<{len(ref) // 2}h", ref)
            diffs = [abs(x - y) for x, y in zip(a, b, strict=True) if x != y]
            first = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
            detail += (
                f"; {len(diffs)} of {len(a)} samples differ (max |diff| {max(diffs)} LSB, "
                f"first at sample {first})"
            )
        return Finding("bystander", "bystander_audio", "bystander", detail, "bystander_audio")

    async def prepare(self) -> None:
        first, findings = await self.bystander_round("bystander-ref-1")
        second, more = await self.bystander_round("bystander-ref-2")
        self.record(findings + more)
        self.reference = first
        stable = first is not None and first == second
        self.report.bystander.update(reference_bytes=len(first or b""), reference_stable=stable)
        if not stable:
            self.record(
                [
                    Finding(
                        "bystander",
                        "bystander_audio",
                        "idle reference",
                        "two runs on an idle server differ: audio is not deterministic at all",
                        "bystander_audio",
                    )
                ]
            )
            self.reference = None

    async def _bystander_loop(self, stop: asyncio.Event) -> None:
        while True:
            rounds = self.report.bystander["rounds"]
            audio, findings = await self.bystander_round(f"bystander-{rounds}")
            self.report.bystander["rounds"] = rounds + 1
            mismatch = self._compare(audio, "during the barrage")
            if mismatch is None and audio and self.reference is not None:
                self.report.bystander["identical"] += 1
            self.record([*findings, *([mismatch] if mismatch else [])])
            if stop.is_set():
                return

    # -- the barrage --

    async def _native_session(self, name: str, steps: Sequence[Step]) -> None:
        conn: _NativeConn | None = None
        try:
            for index, step in enumerate(steps):
                if conn is None or conn.closed.is_set():
                    if conn is not None:
                        self.record(conn.judge_idle_close())
                        await conn.close()
                    conn = await _NativeConn.open(self, name)
                self.record(await conn.play(step, index))
        except (OSError, TimeoutError, websockets.WebSocketException, RuntimeError) as exc:
            self.record(
                [
                    Finding(
                        "ws",
                        "connect_failed",
                        name,
                        f"could not open a session: {exc!r}",
                        "connect",
                    )
                ]
            )
        finally:
            if conn is not None:
                await conn.close()

    async def _compat_session(self, name: str, steps: Sequence[Step]) -> None:
        conn: _CompatConn | None = None
        try:
            for index, step in enumerate(steps):
                if step.fresh:
                    fresh = await _CompatConn.open(self, name, configure=False)
                    try:
                        self.record(await fresh.play(step, index))
                    finally:
                        await fresh.close()
                    continue
                if conn is None or conn.closed.is_set():
                    if conn is not None:
                        self.record(conn.judge_idle_close())
                        await conn.close()
                    conn = await _CompatConn.open(self, name, configure=True)
                self.record(await conn.play(step, index))
        except (OSError, TimeoutError, websockets.WebSocketException, RuntimeError) as exc:
            self.record(
                [
                    Finding(
                        "stream",
                        "connect_failed",
                        name,
                        f"could not open a session: {exc!r}",
                        "connect",
                    )
                ]
            )
        finally:
            if conn is not None:
                await conn.close()

    async def barrage(self, plan: Plan, example: int) -> None:
        if self.stop_after is not None and self.report.messages >= self.stop_after:
            return
        stop = asyncio.Event()
        bystander = asyncio.create_task(self._bystander_loop(stop))
        sessions = [self._native_session(f"w{example}x{i}", s) for i, s in enumerate(plan.native)]
        sessions += [self._compat_session(f"v{example}x{i}", s) for i, s in enumerate(plan.compat)]
        started = time.monotonic()
        try:
            await asyncio.gather(*sessions)
        finally:
            stop.set()
            await bystander
        self.report.examples += 1
        middle = time.monotonic()
        await self.minimize_pending()
        self.report.timings["barrage"] += middle - started
        self.report.timings["minimize"] += time.monotonic() - middle

    # -- minimization --

    async def _replay(self, finding: Finding, probes: Sequence[ProbeSpec]) -> list[str] | None:
        """Play ``probes`` on a fresh session; the frames sent if ``finding`` recurred."""
        if self.budget <= 0 or finding.step is None:
            return None
        self.budget -= 1
        step = Step(finding.step.family, tuple(probes), finding.step.fresh)
        conn: _Conn
        if finding.endpoint == "ws":
            conn = await _NativeConn.open(self, "r")
        else:
            conn = await _CompatConn.open(self, "r", configure=not step.fresh)
        conn.counting = False
        try:
            found = await conn.play(step, self.budget)
        finally:
            await conn.close()
        for f in found:
            if f.signature == finding.signature:
                return f.frames
        return None

    async def _minimize(self, finding: Finding) -> None:
        assert finding.step is not None
        probes = list(finding.step.probes)
        frames = None
        for _attempt in range(3):
            frames = await self._replay(finding, probes)
            if frames is not None:
                break
        if frames is None:
            finding.repro_note = (
                "did not recur when the step was replayed alone (a race, or it needs the barrage)"
            )
            return
        finding.repro = frames
        for probe in probes:
            if not probe.label.startswith(("cleanup.", "restore.")):
                single = await self._replay(finding, [probe])
                if single is not None:
                    finding.repro, finding.culprit = single, probe.label
                    return
        for i in reversed(range(len(probes))):
            if len(probes) == 1:
                break
            candidate = probes[:i] + probes[i + 1 :]
            smaller = await self._replay(finding, candidate)
            if smaller is not None:
                probes, finding.repro = candidate, smaller

    async def minimize_pending(self) -> None:
        pending, self.to_minimize = self.to_minimize, []
        for finding in pending:
            if self.budget <= 0:
                finding.repro_note = "not minimized (replay budget spent)"
                continue
            try:
                await self._minimize(finding)
            except (OSError, TimeoutError, websockets.WebSocketException, RuntimeError) as exc:
                finding.repro_note = f"replay failed: {exc!r}"

    # -- after the barrage (oracle 1, and the busy-loop check) --

    async def finish(self) -> None:
        try:
            health = await asyncio.to_thread(get_json, f"{self.facts.http}/health", 5.0)
            alive = health.get("status") == "ok"
        except (OSError, ValueError) as exc:
            alive = False
            self.record(
                [
                    Finding(
                        "server",
                        "server_dead",
                        "/health",
                        f"/health did not answer: {exc!r}",
                        "server_dead",
                    )
                ]
            )
        audio, findings = await self.bystander_round("after-the-barrage")
        self.record(findings)
        if not audio:
            alive = False
            self.record(
                [
                    Finding(
                        "server",
                        "fresh_session",
                        "ws",
                        "a fresh session got no audio after the barrage",
                        "fresh",
                    )
                ]
            )
        else:
            mismatch = self._compare(audio, "fresh session after the barrage")
            if mismatch is not None:
                self.record([mismatch])
        if not await self._fresh_compat():
            alive = False
        self.report.server_alive = alive
        await self._spin_check()

    async def _fresh_compat(self) -> bool:
        try:
            conn = await _CompatConn.open(self, "fresh", configure=True)
        except (OSError, TimeoutError, websockets.WebSocketException, RuntimeError) as exc:
            self.record(
                [
                    Finding(
                        "server",
                        "fresh_session",
                        "stream",
                        f"could not open a session: {exc!r}",
                        "fresh",
                    )
                ]
            )
            return False
        conn.counting = False
        try:
            await conn.ws.send(
                json.dumps({"type": "input.text", "text": "A fresh session after the barrage."})
            )
            ok = await conn._barrier()
            errors = [m for m, _ in conn.errors]
        finally:
            await conn.close()
        if not ok or errors:
            self.record(
                [
                    Finding(
                        "server",
                        "fresh_session",
                        "stream",
                        f"a fresh session did not finish cleanly (errors: {errors[:2]})",
                        "fresh",
                    )
                ]
            )
            return False
        return True

    async def _hold(self, update: dict[str, Any] | None) -> tuple[float, bool]:
        """CPU share of the server while one session holds an idle context for a while."""
        cpu = self.config.cpu_seconds
        assert cpu is not None
        ws = await _connect(self.facts.ws_url)
        accepted = True
        try:
            await ws.recv()
            await ws.send(
                json.dumps({"type": "context.create", "context_id": "hold", "event_id": "hold"})
            )
            if update is not None:
                await ws.send(json.dumps(update))
                while True:
                    msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    if msg.get("event_id") == update["event_id"]:
                        accepted = msg.get("type") == "session.updated"
                        break
            # A watcher may sleep out the old timeout (up to a second) before it
            # looks at the new one.
            await asyncio.sleep(SPIN_SETTLE_S)
            cpu0, t0 = cpu(), time.monotonic()
            await asyncio.sleep(self.config.spin_window_s)
            share = (cpu() - cpu0) / (time.monotonic() - t0)
        finally:
            await ws.close()
        return share, accepted

    async def _spin_check(self) -> None:
        if self.config.cpu_seconds is None:
            self.report.busy_loop = {
                "checked": False,
                "why": "no way to read the server's CPU time",
            }
            return
        update = {"type": "session.update", "idle_timeout_s": 1e-9, "event_id": "spin"}
        try:
            baseline, _ = await self._hold(None)
            share, accepted = await self._hold(update)
        except (OSError, TimeoutError, websockets.WebSocketException, ValueError) as exc:
            self.report.busy_loop = {"checked": False, "why": repr(exc)}
            return
        spinning = accepted and share > baseline + SPIN_MARGIN
        self.report.busy_loop = {
            "checked": True,
            "idle_timeout_accepted": accepted,
            "cpu_share_baseline": round(baseline, 3),
            "cpu_share_with_tiny_idle_timeout": round(share, 3),
            "spinning": spinning,
        }
        if spinning:
            frames = [
                show(
                    json.dumps({"type": "context.create", "context_id": "hold", "event_id": "hold"})
                ),
                show(json.dumps(update)),
            ]
            detail = (
                f"with a context open, the server used {share:.0%} of a core for "
                f"{self.config.spin_window_s:g} s of an idle session (baseline {baseline:.0%})"
            )
            finding = Finding(
                "server",
                "busy_loop",
                "session.update.idle_timeout_s=1e-9",
                detail,
                "busy_loop",
                frames,
            )
            finding.repro = frames
            self.record([finding])


def _example_runner(
    run: _Run, facts: ServerFacts, config: FuzzConfig, seed: int | None
) -> Callable[[], None]:
    counter = itertools.count()

    @settings(
        max_examples=config.examples,
        deadline=None,
        derandomize=seed is None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        print_blob=False,
    )
    @given(plan=plans(facts, config))
    def one_barrage(plan: Plan) -> None:
        asyncio.run(run.barrage(plan, next(counter)))

    return hypothesis_seed(seed)(one_barrage) if seed is not None else one_barrage


class Fuzzer:
    """Prepare (idle reference), explore (barrages), finish (liveness, spin check)."""

    def __init__(
        self, facts: ServerFacts, config: FuzzConfig, report: FuzzReport | None = None
    ) -> None:
        self.facts = facts
        self.config = config
        self.report = report or FuzzReport()
        self._run = _Run(facts, config, self.report)
        self._started = time.monotonic()

    def prepare(self) -> None:
        started = time.monotonic()
        asyncio.run(self._run.prepare())
        self.report.timings["prepare"] += time.monotonic() - started

    def explore(
        self, examples: int | None = None, seed: int | None = None, stop_after: int | None = None
    ) -> None:
        """Run barrages; with ``stop_after``, skip the rest once that many messages went out."""
        self._run.stop_after = stop_after
        config = self.config if examples is None else _replace_examples(self.config, examples)
        _example_runner(
            self._run, self.facts, config, seed if seed is not None else self.config.seed
        )()

    def finish(self) -> FuzzReport:
        started = time.monotonic()
        asyncio.run(self._run.finish())
        self.report.timings["finish"] += time.monotonic() - started
        self.report.duration_s = time.monotonic() - self._started
        return self.report


def _replace_examples(config: FuzzConfig, examples: int) -> FuzzConfig:
    from dataclasses import replace

    return replace(config, examples=examples)


def run_fuzz(facts: ServerFacts, config: FuzzConfig) -> FuzzReport:
    fuzzer = Fuzzer(facts, config)
    fuzzer.prepare()
    fuzzer.explore()
    return fuzzer.finish()


def process_cpu_seconds(pid: int) -> Callable[[], float]:
    """User + system CPU seconds of a process, read from /proc (Linux)."""
    ticks = os.sysconf("SC_CLK_TCK")
    stat = Path(f"/proc/{pid}/stat")

    def read() -> float:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks

    return read
