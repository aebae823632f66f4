"""Hostile but valid message sequences on the native socket: bursts that re-create ids,
too many contexts, text after ``context.end``, unknown ids, extreme settings, more after
``session.close``, text the model must speak or refuse cleanly."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from bench.fuzzing.facts import ServerFacts
from bench.fuzzing.fields import idle_judge, native_fields
from bench.fuzzing.messages import Binary, Body, Cid, EventId, Json, ProbeSpec, Step, Verbatim
from bench.fuzzing.native import (
    POISONED,
    append_msg,
    cancel_msg,
    create_msg,
    message,
    probe,
    restore,
)
from bench.fuzzing.rules import CLOSE_NORMAL, ECHO_MAX, IDLE_MIN_S, INT64_MAX
from bench.fuzzing.values import hostile_strings, text_verdict
from bench.fuzzing.verdicts import OK, Verdict, bad, maybe


@st.composite
def burst(draw: st.DrawFn, facts: ServerFacts) -> Step:
    """create -> append -> cancel, over and over, re-creating ids still being cancelled."""
    rounds = draw(st.integers(1, 6))
    ids = draw(st.integers(1, min(3, facts.max_contexts)))
    text = draw(st.sampled_from(["hello there ", "x", "", "Hi. How are you? ", "\U0001f600 "]))
    flush = draw(st.booleans())
    probes: list[ProbeSpec] = []
    for i in range(rounds):
        name, again = f"b{i % ids}", i >= ids
        probes += [
            probe("burst.create", create_msg(name), maybe("context_exists") if again else OK),
            probe(
                "burst.append",
                append_msg(name, text, flush=flush),
                maybe("context_closed") if again else OK,
            ),
            probe("burst.cancel", cancel_msg(Cid(name))),
        ]
    return Step("seq.burst", tuple(probes))


@st.composite
def too_many(draw: st.DrawFn, facts: ServerFacts) -> Step:
    limit = facts.max_contexts
    count = limit + draw(st.integers(1, 3))
    probes = [
        probe("too-many.create", create_msg(f"c{i}"), OK if i < limit else bad("too_many_contexts"))
        for i in range(count)
    ]
    probes += [
        probe(
            "too-many.implicit-create",
            append_msg("c-implicit", "one too many "),
            bad("too_many_contexts"),
        ),
        # docs/protocol.md: a cancelled context stops counting at once.
        probe("too-many.cancel-one", cancel_msg(Cid("c0"))),
        probe("too-many.create-after-cancel", create_msg("c-late")),
    ]
    probes += [probe("cleanup.cancel", cancel_msg(Cid(f"c{i}"))) for i in range(1, limit)]
    probes += [
        probe("cleanup.cancel-refused", cancel_msg(Cid(f"c{i}")), bad("unknown_context"))
        for i in range(limit, count)
    ]
    probes += [
        probe("cleanup.cancel-refused", cancel_msg(Cid("c-implicit")), bad("unknown_context")),
        probe("cleanup.cancel", cancel_msg(Cid("c-late"))),
    ]
    return Step("seq.too-many-contexts", tuple(probes))


@st.composite
def after_end(draw: st.DrawFn, facts: ServerFacts) -> Step:
    late = [
        probe("after-end.append", append_msg("a", "too late "), bad("context_closed")),
        probe(
            "after-end.flush", message("context.flush", context_id=Cid("a")), bad("context_closed")
        ),
        probe("after-end.end", message("context.end", context_id=Cid("a")), bad("context_closed")),
    ]
    order = draw(st.permutations(late))
    probes = [
        probe("after-end.create", create_msg("a")),
        probe(
            "after-end.append-first",
            append_msg("a", draw(st.sampled_from(["Short. ", "", "words "]))),
        ),
        probe("after-end.end-first", message("context.end", context_id=Cid("a"))),
        *order,
        probe("after-end.cancel", cancel_msg(Cid("a"))),
    ]
    return Step("seq.append-after-end", tuple(probes))


@st.composite
def ghosts(draw: st.DrawFn, facts: ServerFacts) -> Step:
    played = draw(st.sampled_from([None, 0, 1500, INT64_MAX]))
    cancel = message("context.cancel", context_id=Cid("g3"))
    if played is not None:
        cancel["played_ms"] = played
    probes = [
        probe(
            "ghost.flush",
            message("context.flush", context_id=Cid("g1"), flush_id="f"),
            bad("unknown_context"),
        ),
        probe("ghost.end", message("context.end", context_id=Cid("g2")), bad("unknown_context")),
        probe("ghost.cancel", cancel, bad("unknown_context")),
    ]
    return Step("seq.unknown-ids", tuple(draw(st.permutations(probes))))


@st.composite
def recreate(draw: st.DrawFn, facts: ServerFacts) -> Step:
    """Duplicate creates, double cancels, and re-creating an id that is ending or cancelling."""
    finish = draw(st.sampled_from(["cancel", "end"]))
    stop = (
        cancel_msg(Cid("a")) if finish == "cancel" else message("context.end", context_id=Cid("a"))
    )
    probes = [
        probe("recreate.create", create_msg("a")),
        probe("recreate.duplicate", create_msg("a", voice=facts.voices[-1]), bad("context_exists")),
        probe("recreate.append", append_msg("a", "first life ")),
        probe(f"recreate.{finish}", stop),
        probe(
            f"recreate.{finish}-again", stop, OK if finish == "cancel" else bad("context_closed")
        ),
        probe("recreate.create-again", create_msg("a"), maybe("context_exists")),
        probe("recreate.append-again", append_msg("a", "second life "), maybe("context_closed")),
        probe("recreate.cancel", cancel_msg(Cid("a"))),
    ]
    return Step("seq.recreate", tuple(probes))


@st.composite
def implicit(draw: st.DrawFn, facts: ServerFacts) -> Step:
    flush_label, flush_id, flush_verdict = draw(native_fields(facts, "context.flush")["flush_id"])
    probes = [
        probe("implicit.append", append_msg("a", "Opened by text. ", flush=draw(st.booleans()))),
        probe("implicit.append-more", append_msg("a", "More")),
        probe(
            f"implicit.flush.flush_id={flush_label}",
            message("context.flush", context_id=Cid("a"), flush_id=flush_id),
            flush_verdict,
        ),
        probe("implicit.end", message("context.end", context_id=Cid("a"))),
        probe("implicit.cancel", cancel_msg(Cid("a"))),
    ]
    return Step("seq.implicit-create", tuple(probes))


@st.composite
def too_long(draw: st.DrawFn, facts: ServerFacts) -> Step:
    limit = facts.max_text_chars
    if limit + 512 > facts.max_message_bytes:
        return Step("seq.text-too-long", (probe("too-long.keepalive", message("keepalive")),))
    probes = [
        probe("too-long.create", create_msg("a")),
        probe("too-long.over", append_msg("a", "x" * (limit + 1)), bad("text_too_long")),
        probe("too-long.small", append_msg("a", "ok ")),
    ]
    if draw(st.booleans()):
        probes += [
            probe("too-long.to-the-limit", append_msg("a", "y" * (limit - 3))),
            probe("too-long.one-more", append_msg("a", "z"), bad("text_too_long")),
        ]
    probes += [
        probe("too-long.cancel", cancel_msg(Cid("a"))),
        probe("too-long.implicit-over", append_msg("b", "w" * (limit + 1)), bad("text_too_long")),
        probe("cleanup.cancel-refused", cancel_msg(Cid("b")), bad("unknown_context")),
    ]
    return Step("seq.text-too-long", tuple(probes))


@st.composite
def update_extremes(draw: st.DrawFn, facts: ServerFacts) -> Step:
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
        verdict = verdict | idle_judge(facts)(idle)
    if (
        "instructions" in fields
        or "top_k" in fields
        or "max_new_tokens" in fields
        or "language" in fields
    ):
        verdict = verdict | maybe("invalid_field", "unsupported_language")
    update = probe(
        "extremes.update."
        + "+".join(
            f"{k}={v if not isinstance(v, str) or len(v) < 20 else 'long'}" for k, v in picked
        ),
        message("session.update", **fields),
        verdict,
    )
    use = OK if not verdict.codes else maybe(*POISONED)
    probes = [
        update,
        probe("extremes.create", create_msg("a"), use),
        probe(
            "extremes.append",
            append_msg("a", "Speaking under extreme settings. "),
            use | maybe("context_closed"),
        ),
        probe(
            "extremes.flush",
            message("context.flush", context_id=Cid("a")),
            use | maybe("context_closed", "unknown_context"),
        ),
        probe("extremes.cancel", cancel_msg(Cid("a")), maybe("unknown_context")),
        restore(facts),
    ]
    return Step("seq.update-extremes", tuple(probes))


_CLOSING_FOLLOWUPS: tuple[tuple[str, Body], ...] = (
    ("keepalive", Json(message("keepalive"))),
    ("create", Json(create_msg("late"))),
    ("append", Json(append_msg("a", "after close "))),
    ("update", Json(message("session.update", speed=2.0))),
    ("close-again", Json(message("session.close"))),
    ("garbage", Verbatim("{not json")),
    ("unknown-type", Json(message("no.such.type"))),
    ("binary", Binary(12)),
)


@st.composite
def close_then_more(draw: st.DrawFn, facts: ServerFacts) -> Step:
    probes: list[ProbeSpec] = []
    if draw(st.booleans()):
        probes += [
            probe("close.create", create_msg("a")),
            probe("close.append", append_msg("a", "Finish me before you close. ")),
        ]
    probes.append(
        probe("close.session.close", message("session.close"), maybe(closes=(CLOSE_NORMAL,)))
    )
    after = maybe("session_closing", echo="optional", closes=(CLOSE_NORMAL,))
    for label, body in draw(st.lists(st.sampled_from(_CLOSING_FOLLOWUPS), min_size=1, max_size=4)):
        probes.append(ProbeSpec(body, f"close.then-{label}", after))
    return Step("seq.close-then-more", tuple(probes))


@st.composite
def cancel_played(draw: st.DrawFn, facts: ServerFacts) -> Step:
    label, value, verdict = draw(native_fields(facts, "context.cancel")["played_ms"])
    probes = [
        probe("played.create", create_msg("a")),
        probe("played.append", append_msg("a", "Cancel me. ")),
        probe(
            f"played.cancel.played_ms={label}",
            message("context.cancel", context_id=Cid("a"), played_ms=value),
            verdict,
        ),
        probe("cleanup.cancel", cancel_msg(Cid("a"))),
    ]
    return Step("seq.cancel-played-ms", tuple(probes))


@st.composite
def hostile_text(draw: st.DrawFn, facts: ServerFacts) -> Step:
    """Hostile text the model has to speak (or refuse cleanly), under hostile buffering;
    the step waits for the context to end, so failures of the synthesis count here."""
    field = native_fields(facts, "text.append")["text"]
    curated = [v for v in hostile_strings(facts.max_message_bytes) if len(v[1]) <= 400]
    curated += [("nul-in-sentence", "Hello\x00world. "), ("nul-only", "\x00")]
    judged = st.sampled_from(curated).map(lambda v: (v[0], v[1], text_verdict(facts, v[1])))
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
        probe(f"hostile-text.create.buffer={buffer_label}", create_msg("a", **fields), create),
        probe(f"hostile-text.append.text={label}", append_msg("a", text), verdict),
        probe(
            "hostile-text.end",
            message("context.end", context_id=Cid("a")),
            maybe("unknown_context") if uncertain else OK,
        ),
    ]
    return Step("seq.hostile-text", tuple(probes), settle=True)


@st.composite
def long_event_id(draw: st.DrawFn, facts: ServerFacts) -> Step:
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
    return Step("seq.long-event-id", (probe(f"long-event-id.{kind}", node, verdict),))
