"""Model YAML configs load into typed objects; mistakes name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from voiceserver.config import CONFIG_DIR, load_model_config


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_config_loads(path: Path) -> None:
    config = load_model_config(path)
    assert config.name and config.family
    assert config.engine.first_chunk_frames >= 1


def test_default_config_is_piper() -> None:
    config = load_model_config("piper-joe")
    assert config.family == "piper" and config.engine.first_chunk_frames == 8


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: x\nfamily: tiny\nengin: {}\n", "unknown key 'engin'"),
        ("name: x\nfamily: tiny\nengine: {max_ar_bach: 2}\n", "unknown key engine.max_ar_bach"),
        ("name: x\nfamily: tiny\nengine: {max_ar_batch: two}\n", "engine.max_ar_batch must be int"),
        ("name: x\nfamily: tiny\nsegmenter: {mode: sometimes}\n", "segmenter.mode must be one of"),
        ("family: tiny\n", "'name' is required"),
    ],
)
def test_mistakes_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        load_model_config(path)


def test_unknown_config_lists_known_ones() -> None:
    with pytest.raises(FileNotFoundError, match="piper-joe"):
        load_model_config("no-such-model")


def test_model_options_are_checked_by_the_family(tmp_path: Path) -> None:
    from models.registry import resolve

    config = load_model_config("tiny", {"hiden": 3})
    with pytest.raises(ValueError, match="unknown key model.hiden"):
        resolve(config.family)(config.model, None)
