"""VoxCPM2's tokenization against the reference's own (voxcpm 2.0.3 on transformers 5.3:
its wrapped tokenizer, CJK pieces split): equal ids on English, Chinese, mixed text,
spacing, digits, special-token spellings and characters only bytes cover."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.voxcpm.text import VoxCPMText
from tests.models.reference_env import outputs, run_script
from tests.models.voxcpm.ckpt import build

REPO = Path(__file__).resolve().parents[3]
PYTHON = REPO / ".venv-ref-voxcpm" / "bin" / "python"
SCRIPT = REPO / "tools" / "ref" / "voxcpm" / "run_reference.py"
SETUP = "tools/ref/voxcpm/make_venv.sh"
TEXTS = [
    "Hello world, how are you?",
    "你好世界!",
    "mixed 中文 and English text.",
    " leading space",
    "trailing space ",
    "double  space\tand tab",
    "Numbers 123 and 4.5, then 2026.",
    "emoji 😀 and é accents",
    "<|audio_start|> inside text",
    "after<|audio_end|>glued",
    "",
]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("voxcpm") / "ckpt", seed=1)


@pytest.fixture(scope="module")
def reference(ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("voxcpm-tok")
    return outputs(run_script(PYTHON, SCRIPT, ckpt, {"tokenize": TEXTS}, out, SETUP), out)


def test_ids_equal_the_reference(ckpt: Path, reference: dict) -> None:
    text = VoxCPMText(ckpt)
    for sentence, theirs in zip(TEXTS, reference["tokens"], strict=True):
        assert text.ids(sentence) == theirs, sentence
