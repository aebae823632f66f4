"""Hostile values for message fields, each with the verdict of a message carrying it.

A strategy here draws a :data:`Variant`: a label for reports, the JSON value (or
:data:`~bench.fuzzing.messages.MISSING`), and its :class:`Verdict`. These are the
building blocks; :mod:`bench.fuzzing.fields` and :mod:`bench.fuzzing.compat` put
them on the fields of each message.
"""

from __future__ import annotations

import functools
import math
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any, Literal

from hypothesis import strategies as st

from bench.fuzzing.facts import ServerFacts
from bench.fuzzing.messages import MISSING, EventId, Raw
from bench.fuzzing.render import has_surrogate
from bench.fuzzing.rules import EMBEDDING_MAX, INT64_MAX
from bench.fuzzing.verdicts import (
    BEYOND_INT64,
    MODEL_REFUSALS,
    OK,
    SURROGATE,
    UNPARSABLE,
    Verdict,
    bad,
    maybe,
)

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


def sample(variants: Sequence[Variant]) -> st.SearchStrategy[Variant]:
    return st.sampled_from(list(variants))


def number(
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
        sample(variants),
        st.integers(-(2**80), 2**80).map(lambda v: ("random-int", v, verdict(v))),
        st.floats(allow_nan=False, allow_infinity=False).map(
            lambda v: ("random-float", v, verdict(v))
        ),
    )


def literal_int(allowed: Sequence[int]) -> st.SearchStrategy[Variant]:
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
    return sample(values)


def enum(allowed: Sequence[str], *, nullable: bool = True) -> st.SearchStrategy[Variant]:
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
    return sample(values)


@functools.cache
def hostile_strings(message_bytes: int) -> list[tuple[str, str]]:
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


def strings(
    facts: ServerFacts,
    judge: Callable[[str], Verdict],
    *,
    nullable: bool = True,
    required: bool = False,
) -> st.SearchStrategy[Variant]:
    """Hostile strings for a text field, each judged; lone surrogates may also be refused."""

    def verdict(text: str) -> Verdict:
        result = judge(text)
        return result | SURROGATE if has_surrogate(text) else result

    fixed: list[Variant] = [
        (label, text, verdict(text)) for label, text in hostile_strings(facts.max_message_bytes)
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
        sample(fixed),
        st.text(max_size=48).map(lambda text: ("random-text", text, verdict(text))),
    )


BOOL_REQUIRED: tuple[Variant, ...] = (
    ("true", True, OK),
    ("false", False, OK),
    ("string", "true", bad("invalid_field")),
    ("int", 1, bad("invalid_field")),
    ("zero", 0, bad("invalid_field")),
    ("null", None, bad("invalid_field")),
    ("list", [True], bad("invalid_field")),
)
BOOL_OPTIONAL: tuple[Variant, ...] = (*BOOL_REQUIRED[:-2], ("null", None, OK), BOOL_REQUIRED[-1])


def embedding(facts: ServerFacts, *, cap: bool) -> st.SearchStrategy[Variant]:
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
    return sample(variants)


@functools.cache
def event_ids(facts: ServerFacts) -> list[Variant]:
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
def type_values(mtype: str, *, vllm: bool = False) -> list[Variant]:
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
def extras(facts: ServerFacts) -> list[Variant]:
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


def text_verdict(facts: ServerFacts, text: str) -> Verdict:
    if len(text) > facts.max_text_chars:
        return bad("text_too_long")
    if has_surrogate(text):
        return SURROGATE
    if has_control(text):
        # Speaking around a control character fits; so does refusing the text.
        return maybe("invalid_field")
    return OK


def has_control(text: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" and ch not in "\t\n\r" for ch in text)


def free_text(text: str) -> Verdict:
    return OK if text in ("", "plain words") else maybe(*MODEL_REFUSALS)


def mutate(
    draw: st.DrawFn,
    msg: dict[str, Any],
    target: str,
    fields: dict[str, st.SearchStrategy[Variant]],
    types: list[Variant],
    facts: ServerFacts,
) -> tuple[str, Verdict] | None:
    """Change ``msg`` where ``target`` says: one of its ``fields``, its ``type`` (one of
    ``types``), or an ``extra`` key; (label, verdict), or None for any other target."""
    if target in fields:
        label, value, verdict = draw(fields[target])
        msg[target] = value
    elif target == "type":
        label, value, verdict = draw(sample(types))
        msg["type"] = value
    elif target == "extra":
        label, (key, value), verdict = draw(sample(extras(facts)))
        msg[key] = value
    else:
        return None
    return label, verdict
