"""Frames that are not well-formed messages: text that is no JSON object, binary frames,
nesting up to 100,000 levels, and frames just over the message limit or past the
transport's cap."""

from __future__ import annotations

from hypothesis import strategies as st

from bench.fuzzing.facts import ServerFacts
from bench.fuzzing.messages import Binary, Cid, Deep, ProbeSpec, Sized, Step, Verbatim
from bench.fuzzing.native import append_msg, cleanup
from bench.fuzzing.rules import CLOSE_POLICY, CLOSE_TOO_BIG, PAST_TRANSPORT_CLOSES
from bench.fuzzing.verdicts import OK, Verdict, bad, maybe

NON_OBJECTS = (
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
def garbage(draw: st.DrawFn, facts: ServerFacts) -> Step:
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
        text = draw(st.sampled_from(NON_OBJECTS))
    else:
        text = '{"type":"keepalive"}\x00'
    return Step(f"garbage.{kind}", (ProbeSpec(Verbatim(text), f"garbage.{kind}", not_a_message),))


@st.composite
def binary_step(draw: st.DrawFn, facts: ServerFacts) -> Step:
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
def deep(draw: st.DrawFn, facts: ServerFacts, compat: bool = False) -> Step:
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
        probes += cleanup(Cid("a"))
    return Step(f"deep.{shape}", tuple(probes))


@st.composite
def oversize(draw: st.DrawFn, facts: ServerFacts) -> Step:
    limit = facts.max_message_bytes
    template = append_msg("a", "")
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
    probes = [ProbeSpec(body, f"oversize.{kind}", verdict), *cleanup(Cid("a"))]
    return Step(f"oversize.{kind}", tuple(probes))
