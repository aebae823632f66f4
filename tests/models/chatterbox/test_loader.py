"""Loading a Chatterbox Turbo checkpoint directory: each missing file is named, and
text of any script encodes (the tokenizer is byte-level)."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.chatterbox.checkpoint import CheckpointError
from models.chatterbox.loader import load
from models.chatterbox.runner import CLONE_VOICE, ChatterboxRunner
from tests.models.chatterbox.ckpt_full import build_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("cbx_loader") / "ckpt", seed=4)


@pytest.mark.parametrize(
    "name",
    ["t3_turbo_v1.safetensors", "s3gen_meanflow.safetensors", "ve.safetensors", "vocab.json"],
)
def test_a_missing_file_is_named(checkpoint: Path, tmp_path: Path, name: str) -> None:
    moved = tmp_path / name
    (checkpoint / name).rename(moved)
    try:
        with pytest.raises((CheckpointError, FileNotFoundError, OSError), match=name):
            load({}, checkpoint)
    finally:
        moved.rename(checkpoint / name)


def test_without_a_builtin_voice_every_request_needs_reference_audio(
    checkpoint: Path, tmp_path: Path
) -> None:
    moved = tmp_path / "conds.pt"
    (checkpoint / "conds.pt").rename(moved)
    try:
        model = load({}, checkpoint)
    finally:
        moved.rename(checkpoint / "conds.pt")
    assert [v.name for v in model.capabilities.voices] == [CLONE_VOICE]
    assert model.capabilities.default_voice == CLONE_VOICE


def test_text_of_any_script_encodes(checkpoint: Path) -> None:
    runner = load({}, checkpoint).runner
    assert isinstance(runner, ChatterboxRunner)
    vocab = runner.model.cfg.text_vocab
    for text in ("Grüße, 漢字 and emoji 😀!", "tab\tand\x00null", "[laugh] well then"):
        (ids,) = runner.encode_text(text)
        assert len(ids) > 0 and ids.min() >= 0 and ids.max() < vocab
    assert runner.encode_text(" \n\t ") == []
