"""Loading a checkpoint directory: files, shards, dtypes and errors that name what is missing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from models.base import parse_options
from models.dtypes import DTYPES
from models.qwen3_tts.config import CheckpointError
from models.qwen3_tts.loader import Qwen3Options, load
from models.qwen3_tts.text_tokenizer import load_text_tokenizer, uses_mistral_pattern

OPTS = {"max_contexts": 1, "kv_capacity": 64}


def copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    return dst


def test_loads_each_variant_with_its_capabilities(ckpt_dirs: dict[str, Path]) -> None:
    cv = load(OPTS, ckpt_dirs["custom_voice"]).capabilities
    assert cv.family == "qwen3_tts" and cv.sample_rate == 24000 and cv.samples_per_frame == 1920
    assert [v.name for v in cv.voices] == ["vivian", "ryan", "dylan"]
    assert cv.languages[0] == "auto" and "en" in cv.languages and "zh" in cv.languages
    assert "sichuan_dialect" not in cv.languages
    assert cv.streaming_text and cv.supports_instructions
    base = load(OPTS, ckpt_dirs["base"]).capabilities  # sharded weights
    assert not base.supports_instructions and base.default_voice == "clone"
    assert load({**OPTS, "checkpoint": str(ckpt_dirs["voice_design"])}).capabilities.voices


@pytest.mark.parametrize(
    ("victim", "named"),
    [
        ("config.json", "config.json"),
        ("model.safetensors", "model.safetensors"),
        ("vocab.json", "vocab.json"),
        ("speech_tokenizer/config.json", "speech_tokenizer/config.json"),
        ("speech_tokenizer/model.safetensors", "speech_tokenizer/model.safetensors"),
    ],
)
def test_missing_file_is_named(
    ckpt_dirs: dict[str, Path], tmp_path: Path, victim: str, named: str
) -> None:
    root = copy(ckpt_dirs["custom_voice"], tmp_path)
    (root / victim).unlink()
    with pytest.raises(CheckpointError, match=named.replace(".", r"\.")):
        load(OPTS, root)


def test_missing_shard_and_tensor_and_key_are_named(
    ckpt_dirs: dict[str, Path], tmp_path: Path
) -> None:
    root = copy(ckpt_dirs["base"], tmp_path)
    shard = sorted(root.glob("model-*.safetensors"))[0]
    tensors = load_file(str(shard))
    victim = sorted(tensors)[0]
    del tensors[victim]
    save_file(tensors, str(shard))
    with pytest.raises(CheckpointError, match=f"missing tensor '{victim}'"):
        load(OPTS, root)
    shard.unlink()
    with pytest.raises(CheckpointError, match=shard.name):
        load(OPTS, root)
    config = json.loads((root / "config.json").read_text())
    del config["talker_config"]["codec_bos_id"]
    (root / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="talker_config.*codec_bos_id"):
        load(OPTS, root)


def test_unknown_option_is_rejected(ckpt_dirs: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="model.dtipe"):
        load({"dtipe": "float32"}, ckpt_dirs["custom_voice"])
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load({})


def test_bf16_weights_load_as_float32(ckpt_dirs: dict[str, Path], tmp_path: Path) -> None:
    root = copy(ckpt_dirs["voice_design"], tmp_path)
    path = root / "model.safetensors"
    save_file({k: v.to(torch.bfloat16) for k, v in load_file(str(path)).items()}, str(path))
    model = load(OPTS, root)
    weight = model.runner.talker.codec_head.weight  # type: ignore[attr-defined]
    assert weight.dtype == torch.float32


def test_tokenizer_pattern_follows_the_reference_rule(ckpt_dirs: dict[str, Path]) -> None:
    assert uses_mistral_pattern("4.57.3") and uses_mistral_pattern("")
    assert not uses_mistral_pattern("4.57.1") and not uses_mistral_pattern("5.0.0")
    fixed = load_text_tokenizer(ckpt_dirs["custom_voice"], "4.57.3")
    plain = load_text_tokenizer(ckpt_dirs["custom_voice"], "4.51.0")
    # The Mistral-fixed pattern splits inner capitals; Qwen2's keeps the word whole.
    pieces = [t.tokenizer.pre_tokenizer.pre_tokenize_str("HelloWorld") for t in (fixed, plain)]
    assert [len(p) for p in pieces] == [2, 1]
    assert fixed.encode("hello world") == plain.encode("hello world")
    assert len(fixed.encode("<|im_start|>assistant\n")) == 3


@pytest.mark.parametrize(
    "path", sorted((Path(__file__).resolve().parents[3] / "configs").glob("qwen3-tts-*.yaml"))
)
def test_shipped_configs_parse(path: Path, ckpt_dirs: dict[str, Path]) -> None:
    data = yaml.safe_load(path.read_text())
    assert data["family"] == "qwen3_tts"
    options = parse_options(Qwen3Options, data["model"], "model")
    assert options.max_frames > 0 and options.dtype in DTYPES
    model = load({**data["model"], "max_contexts": 1, "kv_capacity": 64}, ckpt_dirs["voice_design"])
    assert model.capabilities.max_frames_per_context == options.max_frames
