"""The shared request mapping's pieces on their own: language spellings, model names,
what counts as a local path, and which addresses a fetch may reach."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from models.base import ModelInputError
from voiceserver.config import ModelConfig, model_config_from_mapping
from voiceserver.languages import resolve_language
from voiceserver.media import is_local_path
from voiceserver.names import ModelNames, checkpoint_names, openai_voice
from voiceserver.public_ip import is_public as _public

QWEN = ("auto", "en", "zh", "de", "japanese")


@pytest.mark.parametrize(
    ("sent", "declared", "got"),
    [
        ("English", ("en",), "en"),
        ("english", ("en",), "en"),
        ("EN", ("en",), "en"),
        ("en_US", ("en",), "en"),
        ("Auto", ("en",), "en"),
        (None, ("en",), "en"),
        ("Auto", QWEN, "auto"),
        ("German", QWEN, "de"),
        ("ja", QWEN, "japanese"),
        ("Japanese", QWEN, "japanese"),
        ("zh-Hans", QWEN, "zh"),
        ("en", ("english", "french"), "english"),
    ],
)
def test_language_spellings_map_to_the_models_own(
    sent: str | None, declared: tuple[str, ...], got: str
) -> None:
    assert resolve_language(sent, declared) == got


def test_unknown_language_names_the_field_and_the_choices() -> None:
    with pytest.raises(ModelInputError) as err:
        resolve_language("French", ("en",))
    assert err.value.param == "language"
    assert "English (en)" in str(err.value) and "auto" in str(err.value)


def config(**extra: object) -> ModelConfig:
    return model_config_from_mapping({"name": "cfg", "family": "fam", **extra}, "test")


def test_model_names_from_config_checkpoint_and_hf_cache(tmp_path: Path) -> None:
    names = ModelNames(config(served_model_name=["a", "b"], checkpoint=str(tmp_path / "My-Ckpt")))
    assert list(names) == ["a", "b", "cfg", "My-Ckpt", "fam"]
    assert "org/my-ckpt" in names and "MY-CKPT" in names and "other" not in names
    assert "org/other" not in names and "/my-ckpt" not in names
    snapshot = tmp_path / "models--Qwen--Qwen3-TTS-X" / "snapshots" / "abc123"
    assert checkpoint_names(snapshot) == ("Qwen/Qwen3-TTS-X", "Qwen3-TTS-X")


def test_yaml_alias_settings_are_checked() -> None:
    assert config(served_model_name="one").served_model_names == ("one",)
    assert config(openai_voices={"Alloy": "v"}).openai_voices == {"alloy": "v"}
    with pytest.raises(ValueError, match="served_model_name"):
        config(served_model_name=[3])
    with pytest.raises(ValueError, match="openai_voices"):
        config(openai_voices=["alloy"])


def test_openai_voice_aliases() -> None:
    voices = ("vivian", "echo")
    assert openai_voice("alloy", voices, {}) is None  # the model's default
    assert openai_voice("Alloy", voices, {"alloy": "vivian"}) == "vivian"
    assert openai_voice("echo", voices, {"echo": "vivian"}) == "echo"  # a real voice wins
    assert openai_voice("someone", voices, {}) == "someone"


def test_paths_are_told_from_base64_audio() -> None:
    audio = base64.b64encode(b"\xff\xf3" + bytes(3000)).decode()
    assert audio.startswith("/") and not is_local_path(audio)
    for path in ("/tmp/ref.wav", "./ref.wav", "../a.wav", "file:///tmp/a.wav", "/data/abcd"):
        assert is_local_path(path)
    assert not is_local_path("UklGRiQAAABXQVZF")


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("192.168.0.1", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("0.0.0.0", False),
        ("::1", False),
        ("fe80::1%eth0", False),
        ("::ffff:127.0.0.1", False),
        ("224.0.0.1", False),
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
    ],
)
def test_only_public_addresses_count_as_public(address: str, public: bool) -> None:
    assert _public(address) is public
