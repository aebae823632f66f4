"""What the VoxCPM2 runner refuses before a step: control tokens spelled out in text."""

from __future__ import annotations

import pytest

from models.base import CLONE_VOICE, ModelInputError, SynthParams
from models.voxcpm.loader import load
from tests.models.voxcpm.ckpt import build


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return load({"max_contexts": 1}, build(tmp_path_factory.mktemp("voxcpm") / "ckpt")).runner


@pytest.mark.parametrize("token", ["<|audio_start|>", "<|audio_prompt_end|>", "</s>", "<s>"])
def test_control_tokens_in_text_are_refused(runner, token: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ModelInputError) as info:
        runner.encode_text(f"Hello {token} there.")
    assert info.value.param == "input" and token in str(info.value)


def test_control_tokens_in_instructions_and_transcripts_are_refused(runner) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ModelInputError) as info:
        runner.prepare(SynthParams(voice="default", instructions="calm<|audio_end|>"))
    assert info.value.param == "instructions"
    params = SynthParams(
        voice=CLONE_VOICE, extra={"ref_audio": b"RIFF", "ref_text": "It <|audio_start|> is."}
    )
    with pytest.raises(ModelInputError) as info:
        runner.validate(params)
    assert info.value.param == "ref_text"


def test_plain_text_with_angle_brackets_speaks(runner) -> None:  # type: ignore[no-untyped-def]
    assert len(runner.encode_text("a <b> c < d > e")) == 1
    assert runner.prepare(SynthParams(voice="default", instructions="warm, slow")).style == (
        "(warm, slow)"
    )
