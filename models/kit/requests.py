"""What a request asks of a family's runner: its checked fields and where its voice is from.

Every family with request fields and cloned voices reads a request the same way: the
fields the model declares, each checked against its declaration, overriding the
model's defaults; and the voice from a stored one (``voice_prompt``, which the
server fills from a stored voice), reference audio to clone now (``ref_audio``), or
the named voice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TypeVar

from models.base import ModelInputError, RequestField

T = TypeVar("T")


def checked(fields: Mapping[str, RequestField], extra: Mapping[str, Any]) -> dict[str, Any]:
    """The request's values of the declared ``fields`` it sets, each checked."""
    return {k: fields[k].check(extra[k]) for k in fields if extra.get(k) is not None}


def overridden(defaults: T, values: Mapping[str, Any]) -> T:
    """``defaults`` (a dataclass) with the fields ``values`` sets replaced."""
    names = defaults.__dataclass_fields__  # type: ignore[attr-defined]
    return replace(defaults, **{k: v for k, v in values.items() if k in names})  # type: ignore[type-var]


def voice_source(
    extra: Mapping[str, Any], stored_type: type[T], family: str, can_clone: bool
) -> tuple[T | None, bool]:
    """``(stored voice or None, whether ref_audio asks for a clone)``; a stored voice
    of another kind, or reference audio a model that cannot clone gets, is refused
    naming the field."""
    stored = extra.get("voice_prompt")
    if stored is not None:
        if not isinstance(stored, stored_type):
            raise ModelInputError(
                f"voice_prompt: must be a stored {family} voice",
                param="voice_prompt",
                code="invalid_field",
            )
        return stored, False
    if extra.get("ref_audio") is None:
        return None, False
    if not can_clone:
        raise ModelInputError(
            "ref_audio: this model cannot clone voices",
            param="ref_audio",
            code="unsupported_value",
        )
    return None, True
