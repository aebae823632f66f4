"""Loading a VoxCPM2 directory: what is missing or wrong is named, and the checkpoint is
recognised from its config alone.

The reference loads with ``strict=False`` (a missing tensor keeps its random start);
here a missing file, a missing, extra or misshapen tensor, or another architecture is
refused with the file or key named.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from models.checkpoint import CheckpointError
from models.registry import recognize
from models.voxcpm.checkpoint import check_weights
from models.voxcpm.loader import load
from tests.models.voxcpm.ckpt import build


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("voxcpm") / "ckpt", seed=2)


@pytest.fixture
def ckpt(original: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(original, tmp_path / "ckpt"))


@pytest.mark.parametrize(
    "name, says",
    [
        ("model.safetensors", "model.safetensors is missing"),
        ("audiovae.pth", "audiovae.pth is missing"),
        ("tokenizer.json", "tokenizer.json is missing"),
        ("config.json", "config.json"),
    ],
)
def test_a_missing_file_is_named(ckpt: Path, name: str, says: str) -> None:
    (ckpt / name).unlink()
    with pytest.raises(CheckpointError, match=says):
        load({}, ckpt)


def _rewrite(ckpt: Path, change) -> None:  # type: ignore[no-untyped-def]
    tensors = load_file(str(ckpt / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(ckpt / "model.safetensors"))


def test_a_missing_or_misshapen_tensor_is_named(ckpt: Path) -> None:
    _rewrite(ckpt, lambda t: t.pop("stop_head.weight"))
    with pytest.raises(CheckpointError, match="missing tensor 'stop_head.weight'"):
        load({}, ckpt)
    _rewrite(ckpt, lambda t: t.update({"stop_head.weight": torch.zeros(3, 5)}))
    with pytest.raises(CheckpointError, match="'stop_head.weight' is \\(3, 5\\) in the file"):
        load({}, ckpt)
    reports = check_weights(ckpt)
    assert not reports[0].ok and "stop_head.weight" in reports[0].describe()


def test_an_extra_tensor_is_named(ckpt: Path) -> None:
    _rewrite(ckpt, lambda t: t.update({"lora.extra": torch.zeros(2)}))
    with pytest.raises(CheckpointError, match="unexpected tensor 'lora.extra'"):
        load({}, ckpt)


def test_check_weights_passes_and_recognition(original: Path) -> None:
    assert all(r.ok for r in check_weights(original))
    found = recognize(original)
    assert found is not None and (found.family, found.config) == ("voxcpm", "voxcpm2")


def test_another_architecture_is_refused(ckpt: Path) -> None:
    data = json.loads((ckpt / "config.json").read_text())
    data["architecture"] = "voxcpm"
    (ckpt / "config.json").write_text(json.dumps(data))
    assert recognize(ckpt) is None or recognize(ckpt).family != "voxcpm"
    with pytest.raises(CheckpointError, match="architecture 'voxcpm' is not served"):
        load({}, ckpt)


@pytest.mark.parametrize(
    "options, says",
    [
        ({"kv_capacity": 10**6}, "model.kv_capacity must be from 64"),
        ({"inference_timesteps": 0}, "model.inference_timesteps"),
        ({"max_new_tokens": 0}, "model.max_new_tokens"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_options_say_what_to_change(original: Path, options: dict, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        load(options, original)
