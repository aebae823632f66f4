"""The fields of each native client message (``/v1/audio/speech/ws``) and the hostile
values each may take, judged by the protocol's rules for that field."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from bench.fuzzing.facts import ServerFacts
from bench.fuzzing.messages import MISSING, Cid
from bench.fuzzing.rules import (
    ALL_RATES,
    BITRATE_RANGE,
    CLOSE_IDLE,
    CONTAINERS,
    CONTEXT_ID_MAX,
    ECHO_MAX,
    ENCODINGS,
    FRAME_MS,
    IDLE_MIN_S,
    INT64_MAX,
    MAX_DELAY_MS_MAX,
    OPUS_RATES,
    PCM_RATES,
)
from bench.fuzzing.values import (
    BOOL_REQUIRED,
    Variant,
    embedding,
    enum,
    free_text,
    has_control,
    literal_int,
    number,
    sample,
    strings,
    text_verdict,
)
from bench.fuzzing.verdicts import MODEL_REFUSALS, OK, Verdict, bad, maybe


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
            sample(
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
        label, value, verdict = draw(enum(ENCODINGS if key == "encoding" else CONTAINERS))
    elif key == "bitrate":
        label, value, verdict = draw(number("int", *BITRATE_RANGE))
    else:
        allowed = ALL_RATES if key == "sample_rate" else FRAME_MS
        label, value, verdict = draw(literal_int(allowed))
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


@functools.cache
def cid_variants() -> list[tuple[str, Any, str, Verdict]]:
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
        # docs/protocol-extensions.md's grammar is ^[A-Za-z0-9_.:-]+$ for the whole id: no newline.
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


def _buffer() -> st.SearchStrategy[Variant]:
    def delay(v: float) -> Verdict:
        if v < 0:
            return bad("invalid_field")
        if v == 0 or v > MAX_DELAY_MS_MAX:
            # 0 ("cut at every word") and very long delays are the server's call.
            return maybe("invalid_field")
        return OK

    whole = sample(
        [
            ("null", None, OK),
            ("empty", {}, OK),
            ("string", "auto", bad("invalid_field")),
            ("list", [], bad("invalid_field")),
            ("unknown-key", {"x_fuzz": 1}, OK),
        ]
    )
    mode = enum(("auto", "manual")).map(
        lambda v: (f"mode={v[0]}", {"mode": v[1]} if v[1] is not None else {}, v[2])
    )
    delays = number("int", 0, None, judge=delay).map(
        lambda v: (f"max_delay_ms={v[0]}", {"mode": "auto", "max_delay_ms": v[1]}, v[2])
    )
    return st.one_of(whole, mode, delays, delays)


def idle_judge(facts: ServerFacts) -> Callable[[float], Verdict]:
    def judge(v: float) -> Verdict:
        if v <= 0 or v > facts.idle_timeout_s:
            return bad("invalid_field")
        if v < IDLE_MIN_S:
            return maybe("invalid_field", closes=(CLOSE_IDLE,))
        return maybe(closes=(CLOSE_IDLE,)) if v < 5 else OK

    return judge


def _sampling_fields() -> dict[str, st.SearchStrategy[Variant]]:
    return {
        "temperature": number("float", 0, 2),
        "top_k": number("int", 0),
        "top_p": number("float", 0, 1, lo_open=True),
        "repetition_penalty": number("float", 0, 10, lo_open=True),
        "seed": number("int", -(2**63), INT64_MAX),  # the models' range: any int64
        "max_new_tokens": number("int", 1),
    }


@functools.cache
def native_fields(facts: ServerFacts, mtype: str) -> dict[str, st.SearchStrategy[Variant]]:
    """Field -> hostile values with verdicts, for each native client message (except
    ``context_id``, which every context message shares)."""
    judged = functools.partial(strings, facts)
    if mtype == "session.update":
        return {
            "model": judged(
                lambda s: OK if s == facts.model else bad("unknown_model", "invalid_field")
            ),
            "voice": judged(_voice_judge(facts, at_create=False)),
            "language": judged(_language_judge(facts, at_create=False)),
            "speed": number("float", 0.25, 4.0),
            "instructions": judged(free_text),
            "output_format": _output_format(at_create=False),
            "audio_transport": enum(("binary", "base64")),
            "timestamps": enum(("none", "word")),
            "idle_timeout_s": number("float", judge=idle_judge(facts)),
            **_sampling_fields(),
        }
    if mtype == "context.create":
        return {
            "voice": judged(_voice_judge(facts, at_create=True)),
            "language": judged(_language_judge(facts, at_create=True)),
            "speed": number("float", 0.25, 4.0),
            "instructions": judged(free_text),
            "output_format": _output_format(at_create=True),
            "ref_audio": st.one_of(
                judged(lambda s: maybe(*MODEL_REFUSALS, "unknown_voice")),
                sample(
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
            "ref_text": judged(free_text),
            "speaker_embedding": embedding(facts, cap=False),
            "buffer": _buffer(),
            **_sampling_fields(),
        }
    if mtype == "text.append":
        return {
            "text": judged(functools.partial(text_verdict, facts), required=True),
            "flush": sample(BOOL_REQUIRED),
        }
    if mtype == "context.flush":
        return {
            "flush_id": judged(
                lambda s: (
                    OK if len(s) <= ECHO_MAX and not has_control(s) else maybe("invalid_field")
                )
            ),
        }
    if mtype == "context.cancel":
        return {"played_ms": number("int", 0)}
    return {}
