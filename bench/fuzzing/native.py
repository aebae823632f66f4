"""Native-socket messages with one thing changed: the builders every native step uses,
and :func:`single`, the step that sends one mutated message with what it needs around
it (a context to act on, the settings restored, a cleanup)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from bench.fuzzing.facts import ServerFacts
from bench.fuzzing.fields import cid_variants, native_fields
from bench.fuzzing.messages import (
    MISSING,
    Body,
    Cid,
    EventId,
    Json,
    Mangled,
    Pairs,
    ProbeSpec,
    Step,
)
from bench.fuzzing.rules import CLOSE_NORMAL
from bench.fuzzing.values import event_ids, mutate, sample, type_values
from bench.fuzzing.verdicts import OK, UNPARSABLE, Verdict, bad, maybe


def message(mtype: str, **fields: Any) -> dict[str, Any]:
    return {"type": mtype, **fields, "event_id": EventId()}


def probe(label: str, node: Any, verdict: Verdict = OK) -> ProbeSpec:
    return ProbeSpec(Json(node), label, verdict)


def create_msg(name: str = "a", **fields: Any) -> dict[str, Any]:
    return message("context.create", context_id=Cid(name), **fields)


def append_msg(name: str, text: str, **fields: Any) -> dict[str, Any]:
    return message("text.append", context_id=Cid(name), text=text, **fields)


def cancel_msg(context_id: Any) -> dict[str, Any]:
    return message("context.cancel", context_id=context_id)


def cleanup(*context_ids: Any) -> list[ProbeSpec]:
    """Cancel what the step may have opened, so the next step starts with no context."""
    return [probe("cleanup.cancel", cancel_msg(c), maybe("unknown_context")) for c in context_ids]


def restore(facts: ServerFacts) -> ProbeSpec:
    """Session settings back to what a fresh session has (as far as they can go back)."""
    node = message(
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
    return probe("restore.session.update", node)


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
POISONED = (
    "unknown_voice",
    "unsupported_language",
    "unknown_model",
    "unsupported_value",
    "invalid_field",
)
"""What a context may be refused for after a session.update that the server took but a
context cannot use (an unknown voice, a bitrate on PCM, ...)."""


@st.composite
def single(draw: st.DrawFn, facts: ServerFacts) -> Step:
    """One client message with one thing changed, and what it needs around it."""
    mtype = draw(st.sampled_from(_SINGLE_TYPES))
    fields = native_fields(facts, mtype)
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

    changed = mutate(draw, msg, target, fields, type_values(mtype), facts)
    if changed is not None:
        label, verdict = changed
    elif target == "context_id":
        label, node, cid_kind, verdict = draw(st.sampled_from(cid_variants()))
        if cid_kind == "other" and mtype in ("context.flush", "context.end", "context.cancel"):
            verdict = bad("unknown_context")
        msg["context_id"] = node
    elif target == "event_id":
        label, value, verdict = draw(sample(event_ids(facts)))
        msg["event_id"] = value
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
            probe("prep.create", create_msg("a")),
            probe("prep.append", append_msg("a", "prep words ")),
        ]
    probes.append(main)
    if mtype == "session.update":
        if draw(st.booleans()):
            # Use the settings once before they go back: a context under them.
            use = maybe(*POISONED) if (verdict.codes or verdict.must) else OK
            probes += [
                probe("use.create", create_msg("u"), use),
                probe(
                    "use.append",
                    append_msg("u", "under new settings "),
                    use | maybe("context_closed") if use.codes else OK,
                ),
                probe("use.cancel", cancel_msg(Cid("u")), maybe("unknown_context")),
            ]
        probes.append(restore(facts))
    if mtype in _CONTEXT_TYPES:
        probes += cleanup(Cid("a"))
        variant = msg.get("context_id")
        if target == "context_id" and isinstance(variant, Cid) and variant != Cid("a"):
            # Also where the id is invalid: a server that took it anyway must not be
            # left with a context that counts against the next step's limit.
            leftover = maybe("unknown_context", *verdict.codes, echo=verdict.echo)
            probes.append(probe("cleanup.cancel", cancel_msg(variant), leftover))
    return Step(f"ws.{mtype}.{target}", tuple(probes))
