"""The one mapper from a request's model options to a model's fields
(``voiceserver.params``), on the families' real declarations."""

from __future__ import annotations

from dataclasses import fields as dataclass_fields

import pytest

from models.base import ModelInputError, RequestField
from models.chatterbox.runner import REQUEST_FIELDS as CHATTERBOX
from models.fields import SHARED
from models.qwen3_tts.params import request_fields
from models.qwen3_tts.sampling import SamplingParams
from models.tiny.model import TinyOptions, TinyRunner
from voiceserver.params import model_options, option_fields

QWEN = request_fields(2000, SamplingParams())
TINY = TinyRunner(TinyOptions(max_contexts=1)).capabilities.request_fields
FAMILIES = {"qwen3_tts": QWEN, "chatterbox": CHATTERBOX, "tiny": TINY}


def refused(fields, options=None, extra=None) -> ModelInputError:
    with pytest.raises(ModelInputError) as err:
        model_options(fields, options or {}, extra or {})
    return err.value


@pytest.mark.parametrize("family", FAMILIES)
def test_a_shared_name_keeps_its_kind_and_stays_within_the_shared_range(family: str) -> None:
    """A family may narrow a shared field, never widen or retype it: a client that
    sends a value the shared declaration allows is refused only by the model's range."""
    for field in FAMILIES[family]:
        shared = SHARED.get(field.name)
        if shared is None:
            continue
        assert field.kind == shared.kind, field.name
        if shared.low is not None:
            assert field.low is not None and field.low >= shared.low, field.name
        if shared.high is not None:
            assert field.high is not None and field.high <= shared.high, field.name


@pytest.mark.parametrize("family", FAMILIES)
def test_every_default_is_a_value_its_field_takes(family: str) -> None:
    for field in FAMILIES[family]:
        if field.default is not None:
            assert field.check(field.default) == field.default, field.name


def test_options_must_be_the_models_own() -> None:
    err = refused(QWEN, {"temprature": 0.5})
    assert (err.param, err.code) == ("temprature", "invalid_field")
    assert str(err).startswith("temprature: not an option of the served model; its options: ")
    listed = str(err).split("its options: ")[1].split(", ")
    assert "temperature" in listed and "ref_audio" not in listed  # audio is not an option
    # A shared name this model does not take is no option of it either.
    assert refused(TINY, {"temperature": 0.5}).param == "temperature"
    err = refused(QWEN, {"ref_audio": "UklGRg=="})
    assert err.param == "ref_audio" and "not an option" in str(err)


def test_top_level_names_are_checked_then_dropped_when_the_model_has_none() -> None:
    assert model_options(TINY, {}, {"temperature": 0.5, "seed": -3, "anything": 1}) == {}
    err = refused(TINY, extra={"temperature": 5})
    assert (err.param, str(err)) == (
        "temperature",
        "temperature: must be a number from 0 to 2, got 5",
    )
    assert refused(TINY, extra={"seed": 1.5}).param == "seed"


def test_the_models_range_wins_over_the_shared_one() -> None:
    assert model_options(QWEN, {}, {"top_k": 1 << 20}) == {"top_k": 1 << 20}
    err = refused(CHATTERBOX, extra={"top_k": 6564})
    assert str(err) == "top_k: must be an integer from 0 to 6563, got 6564"
    assert str(refused(QWEN, {"max_new_tokens": 2001})).endswith("from 1 to 2000, got 2001")


def test_vllm_spellings_map_to_fields_and_errors_name_what_was_sent() -> None:
    got = model_options(QWEN, {}, {"x_vector_only_mode": True, "non_streaming_mode": True})
    assert got == {"x_vector_only": True, "streaming_text": False}
    err = refused(QWEN, extra={"non_streaming_mode": "no"})
    assert (err.param, str(err)) == (
        "non_streaming_mode",
        "non_streaming_mode: must be true or false, got a string",
    )
    assert refused(TINY, extra={"x_vector_only_mode": 1}).param == "x_vector_only_mode"


def test_a_top_level_name_wins_over_options_and_nulls_are_absent() -> None:
    got = model_options(QWEN, {"temperature": 0.1, "top_k": None}, {"temperature": 0.7})
    assert got == {"temperature": 0.7}
    assert model_options(QWEN, {"seed": 5}, {"seed": None}) == {"seed": 5}


def test_values_come_back_as_the_model_takes_them() -> None:
    got = model_options(QWEN, {"temperature": 1, "speaker_embedding": [1, 2]}, {})
    assert got == {"temperature": 1.0, "speaker_embedding": [1.0, 2.0]}
    assert isinstance(got["temperature"], float)


def test_text_and_arrays_are_bounded_like_every_text_field() -> None:
    err = refused(QWEN, {"ref_text": "x" * 10_001})
    assert (err.param, err.code) == ("ref_text", "text_too_long")
    err = refused(QWEN, extra={"ref_text": "a\x00b"})
    assert (err.param, err.code) == ("ref_text", "invalid_field") and "U+0000" in str(err)
    assert refused(TINY, extra={"ref_text": "x" * 10_001}).code == "text_too_long"
    err = refused(QWEN, {"speaker_embedding": [0.0] * 8193})
    assert err.param == "speaker_embedding" and "8192" in str(err)


def test_listed_fields_say_everything_a_client_needs() -> None:
    listed = {f.name: f for f in option_fields(QWEN)}
    top_p = listed["top_p"]
    assert (top_p.type, top_p.minimum, top_p.maximum, top_p.exclusive_minimum) == (
        "number",
        0.0,
        1.0,
        True,
    )
    assert top_p.default == SamplingParams().top_p and top_p.doc
    assert listed["max_new_tokens"].maximum == 2000
    assert listed["ref_audio"].type == "audio"
    assert [f.name for f in option_fields(TINY)] == ["tail_frames"]
    # Every RequestField attribute a client needs has a place in the listing.
    needed = {f.name for f in dataclass_fields(RequestField)} - {"name", "kind", "low", "high"}
    assert needed <= {"low_exclusive", "doc", "default"}
