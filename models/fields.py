"""The request fields several families take, declared once.

A family lists the ones it takes in ``Capabilities.request_fields``, narrowing a
range or setting its default with ``dataclasses.replace`` where its model differs
(``replace(TOP_K, high=6563)``). The server also checks the clients' top-level
spellings of these names against them when the served model does not take one
(``voiceserver.params``): a malformed ``seed`` is refused whichever model is
served, then ignored by a model that has no use for it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from models.base import INT64, RequestField

TEMPERATURE = RequestField("temperature", "number", 0.0, 2.0, doc="0 is greedy decoding")
TOP_K = RequestField("top_k", "integer", 0, INT64[1], doc="0 keeps every token")
TOP_P = RequestField("top_p", "number", 0.0, 1.0, low_exclusive=True, doc="nucleus sampling")
REPETITION_PENALTY = RequestField(
    "repetition_penalty", "number", 0.0, 10.0, low_exclusive=True, doc="1 is none"
)
SEED = RequestField("seed", "integer", *INT64, doc="reproducible sampling; unset: random")
MAX_NEW_TOKENS = RequestField("max_new_tokens", "integer", 1, INT64[1], doc="cap on frames")
STREAMING_TEXT = RequestField(
    "streaming_text", "boolean", doc="read text as it streams in (true) or all of it first"
)
REF_AUDIO = RequestField("ref_audio", "audio", doc="audio of a voice to clone")
REF_AUDIO_SAMPLE_RATE = RequestField(
    "ref_audio_sample_rate", "integer", 1, 384000, doc="with raw samples"
)
REF_TEXT = RequestField("ref_text", "string", doc="the reference audio's transcript")
X_VECTOR_ONLY = RequestField("x_vector_only", "boolean", doc="clone from the x-vector alone")
SPEAKER_EMBEDDING = RequestField("speaker_embedding", "numbers", doc="a precomputed x-vector")
SPEED = RequestField(
    "speed", "number", 0.25, 4.0, doc="1/length of the audio, at the same pitch", default=1.0
)
"""Every model's (a top-level field of every endpoint, not a model option): the
model makes what it can of it (``Capabilities.speed_range``), the server
time-stretches its audio by the rest. The range is OpenAI's."""

SHARED: dict[str, RequestField] = {
    field.name: field
    for field in (
        TEMPERATURE,
        TOP_K,
        TOP_P,
        REPETITION_PENALTY,
        SEED,
        MAX_NEW_TOKENS,
        STREAMING_TEXT,
        REF_AUDIO,
        REF_AUDIO_SAMPLE_RATE,
        REF_TEXT,
        X_VECTOR_ONLY,
        SPEAKER_EMBEDDING,
    )
}
"""Every shared field by name."""


def with_defaults(fields: tuple[RequestField, ...], **defaults: Any) -> tuple[RequestField, ...]:
    """``fields`` with the defaults a loaded model uses (its checkpoint's or options')."""
    return tuple(replace(f, default=defaults[f.name]) if f.name in defaults else f for f in fields)
