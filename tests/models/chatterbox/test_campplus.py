"""S3Gen's speaker x-vector equals the reference's, float32, on real-size random
weights: our Kaldi filterbank equals torchaudio's (``compliance.kaldi.fbank`` as
CAM++'s ``extract_feature`` calls it) within 1e-4 of its magnitude, our resampler
equals torchaudio's ``Resample`` (24 -> 16 kHz as ``embed_ref`` uses it, and other
integer rates) within 1e-6, and our CAM++ x-vector equals the reference's
``CAMPPlus.inference`` within 1e-4, on clips of 1, 4 and 10 s, and through the
whole path ``embed_ref`` takes from a 24 kHz clip (resample, then CAM++)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from models.chatterbox.campplus import EMBEDDING, PREFIX, load_campplus
from models.chatterbox.fbank import frame_count, kaldi_fbank, xvector_features
from models.resample import resample
from tests.models.chatterbox.ckpt_campplus import add_campplus_tensors, speechlike
from tests.models.chatterbox.reference import REPO, run_reference

RUNNER = REPO / "tools" / "ref" / "chatterbox" / "ref_xvector.py"

CLIPS_16K = {"a1": 1.0, "a4": 4.0 + 77 / 16_000, "a10": 10.0 + 3 / 16_000}
"""16 kHz clips (seconds): the filterbank and CAM++ on each."""
CLIPS_24K = {"b1": 1.0, "b4": 4.0 + 7 / 24_000, "b10": 10.0 + 1 / 24_000}
"""24 kHz clips: resampled to 16 kHz, and embedded through that (``embed_ref``'s path)."""
OTHER_RATES = {"r44": (44_100, 16_000), "r22": (22_050, 16_000), "up24": (16_000, 24_000)}
"""Other integer rate pairs, on 1.3 s clips at the first rate."""


def run_ref_xvector(checkpoint: Path, job: dict[str, Any], out: Path) -> dict[str, Any]:
    return run_reference(checkpoint, job, out, RUNNER)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("campplus")
    ckpt = root / "ckpt"
    ckpt.mkdir()
    add_campplus_tensors(ckpt, seed=9)
    wavs: dict[str, np.ndarray] = {}
    tasks: list[dict[str, Any]] = []

    def clip(name: str, seconds: float, sr: int, seed: int) -> str:
        wavs[name] = speechlike(seconds, seed, sr)
        path = root / f"{name}.npy"
        np.save(path, wavs[name])
        return str(path)

    for i, (name, seconds) in enumerate(CLIPS_16K.items()):
        path = clip(name, seconds, 16_000, 200 + i)
        tasks.append({"kind": "fbank", "id": name, "wav": path})
        tasks.append({"kind": "xvector", "id": name, "wav": path})
    for i, (name, seconds) in enumerate(CLIPS_24K.items()):
        path = clip(name, seconds, 24_000, 300 + i)
        tasks.append({"kind": "resample", "id": name, "wav": path})
        tasks.append({"kind": "xvector", "id": f"{name}x", "wav": path, "sr": 24_000})
    for i, (name, (orig, new)) in enumerate(OTHER_RATES.items()):
        path = clip(name, 1.3, orig, 400 + i)
        tasks.append({"kind": "resample", "id": name, "wav": path, "orig_sr": orig, "new_sr": new})
    ref = run_ref_xvector(ckpt, {"tasks": tasks}, root / "ref")
    model = load_campplus(load_file(str(ckpt / "s3gen_meanflow.safetensors")))
    return {"ref": ref, "wavs": wavs, "model": model}


def test_the_oracle_is_real_torchaudio(setup: dict[str, Any]) -> None:
    assert setup["ref"]["torchaudio"].startswith("2.11.1")


@pytest.mark.parametrize("name", list(CLIPS_16K))
def test_fbank_equals_torchaudio(setup: dict[str, Any], name: str) -> None:
    ref, wav = setup["ref"], setup["wavs"][name]
    expected = ref[f"{name}.fbank"]
    ours = kaldi_fbank(wav).numpy()
    assert ours.shape == expected.shape == (frame_count(wav.size), 80)
    assert np.isfinite(expected).all() and expected.std() > 1.0
    scale = max(1.0, float(np.abs(expected).max()))
    assert np.abs(ours - expected).max() <= 1e-4 * scale

    expected = ref[f"{name}.features"]
    ours = xvector_features(torch.from_numpy(wav)).numpy()
    assert ours.shape == expected.shape
    assert np.abs(ours - expected).max() <= 1e-4 * max(1.0, float(np.abs(expected).max()))


@pytest.mark.parametrize("name", list(CLIPS_24K) + list(OTHER_RATES))
def test_resample_equals_torchaudio(setup: dict[str, Any], name: str) -> None:
    orig, new = OTHER_RATES.get(name, (24_000, 16_000))
    wav, expected = setup["wavs"][name], setup["ref"][f"{name}.wav"]
    ours = resample(wav, orig, new)
    assert isinstance(ours, np.ndarray) and ours.dtype == np.float32
    assert ours.shape == expected.shape == (-(-wav.size * new // orig),)
    assert np.abs(expected).max() > 0.05
    assert np.abs(ours - expected).max() <= 1e-6
    as_tensor = resample(torch.from_numpy(wav)[None], orig, new)  # [1, n]: a tensor back
    assert isinstance(as_tensor, torch.Tensor) and as_tensor.shape == (1, expected.size)
    assert np.abs(as_tensor[0].numpy() - expected).max() <= 1e-6


@pytest.mark.parametrize("name", list(CLIPS_16K))
def test_xvector_equals_the_reference(setup: dict[str, Any], name: str) -> None:
    expected = setup["ref"][f"{name}.xvector"]
    ours = setup["model"].embed(setup["wavs"][name])
    assert ours.shape == expected.shape == (EMBEDDING,) and ours.dtype == torch.float32
    assert np.isfinite(expected).all() and expected.std() > 0.01
    np.testing.assert_allclose(ours.numpy(), expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", list(CLIPS_24K))
def test_xvector_of_a_24k_clip_equals_embed_refs(setup: dict[str, Any], name: str) -> None:
    expected = setup["ref"][f"{name}x.xvector"]
    ours = setup["model"].embed(resample(setup["wavs"][name], 24_000, 16_000))
    np.testing.assert_allclose(ours.numpy(), expected, atol=1e-4, rtol=0)


def test_different_voices_give_different_xvectors(setup: dict[str, Any]) -> None:
    ref = setup["ref"]
    assert np.abs(ref["a1.xvector"] - ref["a10.xvector"]).max() > 0.01


def test_loader_names_missing_unexpected_and_misshapen_keys(setup: dict[str, Any]) -> None:
    state = {PREFIX + k: v for k, v in setup["model"].state_dict().items()}
    state["flow.other"] = torch.zeros(1)  # other parts' tensors are ignored
    load_campplus(state)

    missing = dict(state)
    del missing[PREFIX + "xvector.block2.tdnnd7.cam_layer.linear2.bias"]
    del missing[PREFIX + "head.bn1.running_var"]
    with pytest.raises(ValueError, match=r"2 missing.*head\.bn1\.running_var.*tdnnd7"):
        load_campplus(missing)
    with pytest.raises(ValueError, match="missing"):
        load_campplus({"flow.other": torch.zeros(1)})

    extra = dict(state)
    extra[PREFIX + "xvector.block3.tdnnd17.linear1.weight"] = torch.zeros(1)
    with pytest.raises(ValueError, match=r"1 unexpected.*tdnnd17"):
        load_campplus(extra)

    wrong = dict(state)
    wrong[PREFIX + "xvector.dense.linear.weight"] = torch.zeros(EMBEDDING, 512, 1)
    with pytest.raises(ValueError, match=r"wrong shape.*dense\.linear\.weight"):
        load_campplus(wrong)


def test_a_clip_shorter_than_a_frame_is_an_error() -> None:
    with pytest.raises(ValueError, match="too short"):
        kaldi_fbank(np.zeros(399, dtype=np.float32))
    assert kaldi_fbank(np.zeros(400, dtype=np.float32)).shape == (1, 80)
