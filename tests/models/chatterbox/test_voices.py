"""The built-in voice (``conds.pt``) reads as the reference's ``Conditionals.load`` reads it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from models.chatterbox.checkpoint import CheckpointError
from models.chatterbox.voices import load_builtin
from tests.models.chatterbox.ckpt import build_conds
from tests.models.chatterbox.reference import run_reference


def test_builtin_voice_equals_the_reference(tmp_path: Path) -> None:
    ckpt = build_conds(tmp_path / "ckpt", prompt=40, seed=3)
    ref = run_reference(ckpt, {"tasks": [{"kind": "conds", "id": "v"}]}, tmp_path / "ref")
    voice = load_builtin(ckpt)
    assert voice is not None and voice.decoder is not None
    np.testing.assert_array_equal(voice.speaker, ref["v.t3_speaker_emb"].reshape(-1))
    np.testing.assert_array_equal(voice.prompt, ref["v.t3_cond_prompt_speech_tokens"].reshape(-1))
    np.testing.assert_array_equal(voice.decoder.prompt_tokens, ref["v.gen_prompt_token"])
    np.testing.assert_array_equal(voice.decoder.prompt_mel, ref["v.gen_prompt_feat"])
    np.testing.assert_array_equal(voice.decoder.embedding, ref["v.gen_embedding"])


def test_a_checkpoint_without_a_builtin_voice_has_none(tmp_path: Path) -> None:
    assert load_builtin(tmp_path) is None


def test_a_broken_voice_file_is_named(tmp_path: Path) -> None:
    ckpt = build_conds(tmp_path / "ckpt")
    data = torch.load(ckpt / "conds.pt", weights_only=True)
    data["gen"]["embedding"] = torch.zeros(1, 7)
    torch.save(data, ckpt / "conds.pt")
    with pytest.raises(CheckpointError, match="gen.embedding"):
        load_builtin(ckpt)
    (ckpt / "conds.pt").write_bytes(b"not a torch file")
    with pytest.raises(CheckpointError, match="conds.pt"):
        load_builtin(ckpt)
