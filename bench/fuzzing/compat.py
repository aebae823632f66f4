"""The compat socket (``/v1/audio/speech/stream``, vllm-omni's message set): its fields
and its steps.

Its errors carry only a text, so verdicts there just say whether an error is owed
("must"), may come (codes == {"error"}), or must not come.
"""

from __future__ import annotations

import functools
from typing import Any

from hypothesis import strategies as st

from bench.fuzzing.facts import ServerFacts
from bench.fuzzing.garbage import NON_OBJECTS
from bench.fuzzing.messages import (
    MISSING,
    Binary,
    Body,
    Json,
    Mangled,
    ProbeSpec,
    Sized,
    Step,
    Verbatim,
)
from bench.fuzzing.rules import CLOSE_NORMAL, CLOSE_POLICY, INT64_MAX, PAST_TRANSPORT_CLOSES
from bench.fuzzing.values import (
    BOOL_OPTIONAL,
    BOOL_REQUIRED,
    Variant,
    embedding,
    enum,
    free_text,
    mutate,
    number,
    sample,
    strings,
    text_verdict,
    type_values,
)
from bench.fuzzing.verdicts import OK, Verdict, bad, maybe

_ERROR = frozenset({"error"})


def compat_verdict(verdict: Verdict) -> Verdict:
    codes = _ERROR if (verdict.codes or verdict.must) else frozenset()
    return Verdict(codes, verdict.must, "optional", verdict.closes)


@functools.cache
def _compat_config_fields(facts: ServerFacts) -> dict[str, st.SearchStrategy[Variant]]:
    judged = functools.partial(strings, facts)

    def language(text: str) -> Verdict:
        if text in facts.languages or text.lower() == "auto":
            return OK
        if text == "":
            return maybe("error")
        return bad("error")

    bool_optional, bool_required = sample(BOOL_OPTIONAL), sample(BOOL_REQUIRED)
    return {
        "model": judged(lambda s: OK if s == facts.model else bad("error")),
        "voice": judged(lambda s: OK if s in facts.voices else bad("error")),
        "speaker": judged(lambda s: OK if s in facts.voices else bad("error")),
        "task_type": enum(("CustomVoice", "VoiceDesign", "Base")),
        "language": judged(language),
        "instructions": judged(free_text),
        "response_format": enum(("wav", "pcm", "flac", "mp3", "opus"), nullable=False),
        "speed": number("float", 0.25, 4.0),
        "max_new_tokens": number("int", 1, INT64_MAX),
        "initial_codec_chunk_frames": number("int", 0, INT64_MAX),
        "non_streaming_mode": bool_optional,
        "ref_audio": judged(lambda s: maybe("error")),
        "ref_text": judged(free_text),
        "x_vector_only_mode": bool_optional,
        "speaker_embedding": embedding(facts, cap=True),
        "stream_audio": bool_required,
        "word_timestamps": bool_required,  # accepted with COMPAT_SETUP's pcm
        "seed": number("int", -(2**63), INT64_MAX),
        "split_granularity": enum(("none", "sentence", "clause")),  # null: our default
    }


COMPAT_SETUP: dict[str, Any] = {"type": "session.config", "response_format": "pcm"}


def _input_text(text: str) -> ProbeSpec:
    return ProbeSpec(Json({"type": "input.text", "text": text}), "input.text", OK)


def _input_done() -> ProbeSpec:
    return ProbeSpec(Json({"type": "input.done"}), "input.done", OK)


@st.composite
def compat_config(draw: st.DrawFn, facts: ServerFacts) -> Step:
    fields = _compat_config_fields(facts)
    target = draw(st.sampled_from([*fields, "type", "extra", "mangle", "stream-mp3", "valid"]))
    msg: dict[str, Any] = dict(COMPAT_SETUP)
    label, verdict = "valid", OK
    body: Body | None = None
    changed = mutate(draw, msg, target, fields, type_values("session.config", vllm=True), facts)
    if changed is not None:
        label, verdict = changed
    elif target == "stream-mp3":
        msg.update(stream_audio=True, response_format=draw(st.sampled_from(["mp3", "flac"])))
        verdict = bad("error")
    elif target == "mangle":
        how = draw(st.sampled_from(["truncate", "trail", "lead", "quotes", "comma"]))
        label, verdict = how, bad("error")
        body = Mangled(msg, how, draw(st.integers(1, 999)))
    probes = [
        ProbeSpec(
            body or Json(msg), f"stream.session.config.{target}={label}", compat_verdict(verdict)
        )
    ]
    if draw(st.booleans()):
        probes.append(_input_text("Configured. "))
    return Step(f"stream.session.config.{target}", tuple(probes))


@st.composite
def compat_text(draw: st.DrawFn, facts: ServerFacts) -> Step:
    def judge(text: str) -> Verdict:
        return compat_verdict(text_verdict(facts, text))

    label, value, verdict = draw(
        st.one_of(
            strings(facts, judge, required=True),
            st.just(("missing", MISSING, OK)),
            sample(
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
            compat_verdict(verdict),
        )
    ]
    if draw(st.booleans()):
        probes.append(_input_text(" And a tail."))
    return Step("stream.input.text", tuple(probes))


def compat_config_mid_utterance(facts: ServerFacts) -> st.SearchStrategy[Step]:
    probes = (
        _input_text("Half a sentence"),
        ProbeSpec(Json(dict(COMPAT_SETUP)), "stream.session.config.mid-utterance", bad("error")),
    )
    return st.just(Step("stream.config-mid-utterance", probes))


@st.composite
def compat_garbage(draw: st.DrawFn, facts: ServerFacts) -> Step:
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
        body = Verbatim(draw(st.sampled_from(NON_OBJECTS)))
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
def compat_oversize(draw: st.DrawFn, facts: ServerFacts) -> Step:
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
def compat_close(draw: st.DrawFn, facts: ServerFacts) -> Step:
    probes = []
    if draw(st.booleans()):
        probes.append(_input_text("Last words."))
        probes.append(_input_done())
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
def compat_fresh(draw: st.DrawFn, facts: ServerFacts) -> Step:
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
