"""Text as T3 reads it equals the reference's: its clean-up, then the checkpoint's BPE."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.chatterbox.checkpoint import CheckpointError
from models.chatterbox.text import EMPTY_TEXT, load_text_tokenizer, normalize
from tests.models.chatterbox.ckpt import TAGS, build_tokenizer
from tests.models.chatterbox.reference import run_reference

TEXTS = [
    "hello world",
    "  leading space and  double   spaces  ",
    "Wait\u2026 what: yes \u2014 no \u2013 \u201cquoted\u201d \u2018single\u2019 ,comma",
    "[laugh] that's funny[cough] isn't it [chuckle]",
    "\u00fcn\u00efc\u00f6d\u00e9 \u4e2d\u6587 emoji \U0001f389 and tabs\tand\nnewlines",
    "ends with a comma,",
    "Numbers 12345 and 3.14!",
    "",
    "x",
]


def test_ids_equal_the_reference(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    size = build_tokenizer(ckpt)
    tasks = [{"kind": "text", "id": f"t{i}", "text": t} for i, t in enumerate(TEXTS)]
    ref = run_reference(ckpt, {"tasks": tasks}, tmp_path / "ref")
    tokenizer = load_text_tokenizer(ckpt)
    assert len(tokenizer) == size
    for i, text in enumerate(TEXTS):
        normalized = normalize(text)
        assert normalized == ref[f"t{i}.normalized"]
        np.testing.assert_array_equal(tokenizer.encode(normalized), ref[f"t{i}.ids"], err_msg=text)
    tags = tokenizer.encode(normalize("[laugh] ok"))
    assert tags[0] == size - len(TAGS)  # a tag is one id, never split by BPE


def test_normalize_rules() -> None:
    assert normalize("") == EMPTY_TEXT
    assert normalize("ok") == "Ok."
    assert normalize("Is it?") == "Is it?"
    assert normalize("a:b") == "A,b."


def test_missing_tokenizer_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="vocab.json"):
        load_text_tokenizer(tmp_path)
