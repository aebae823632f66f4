"""ReDimNet's mel front end equals torchaudio's ``MelSpectrogram`` (run in the
reference environment, .venv-ref-voxtream) as ReDimNet's ``MelBanks`` configures it:
the filter matrix and window bit for bit, the power spectrogram of the pre-emphasised
clip within 1e-5 of its peak, and the log features normalised over time within 1e-5,
for VoXtream's M model (72 bins, hop 160) on clips of 1 s to 20 s, and for other sizes
(24 bins; hop 240)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from models.blocks.redimnet_features import MelConfig, MelFrontEnd, htk_mel_filters
from tests.models.chatterbox.ckpt_campplus import speechlike
from tests.models.reference_env import outputs, run_script

REPO = Path(__file__).resolve().parents[3]
REF_PYTHON = REPO / ".venv-ref-voxtream" / "bin" / "python"
RUNNER = REPO / "tools" / "ref" / "voxtream" / "ref_speaker.py"
SETUP = "tools/ref/voxtream/make_venv.sh"

CLIPS = {
    "m1": (1.0, 72, 160),
    "m3": (3.0 + 77 / 16_000, 72, 160),
    "m20": (20.0, 72, 160),
    "tiny": (2.0 + 5 / 16_000, 24, 160),
    "hop240": (2.5, 72, 240),
}
"""Clip (seconds, mel bins, hop) at 16 kHz."""


def run_ref_speaker(job: dict[str, Any], out: Path) -> dict[str, Any]:
    """The reference script's outputs by ``<id>.<name>`` (and its torchaudio version)."""
    return outputs(run_script(REF_PYTHON, RUNNER, out, job, out, SETUP), out)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("redimnet_mel")
    wavs, tasks = {}, []
    for i, (name, (seconds, mels, hop)) in enumerate(CLIPS.items()):
        wavs[name] = speechlike(seconds, 500 + i, 16_000)
        path = root / f"{name}.npy"
        np.save(path, wavs[name])
        tasks.append(
            {"kind": "mel", "id": name, "wav": str(path), "n_mels": mels, "hop_length": hop}
        )
    return {"ref": run_ref_speaker({"tasks": tasks}, root / "ref"), "wavs": wavs}


def front_end(mels: int, hop: int) -> MelFrontEnd:
    return MelFrontEnd(MelConfig(n_mels=mels, hop_length=hop))


def test_the_oracle_is_real_torchaudio(setup: dict[str, Any]) -> None:
    assert setup["ref"]["torchaudio"].startswith("2.11.1")


@pytest.mark.parametrize("mels", [72, 24])
def test_filters_and_window_equal_torchaudios(setup: dict[str, Any], mels: int) -> None:
    name = "m1" if mels == 72 else "tiny"
    fb, window = setup["ref"][f"{name}.fb"], setup["ref"][f"{name}.window"]
    ours = htk_mel_filters(257, 20.0, 7600.0, mels, 16_000).numpy()
    assert ours.shape == fb.shape == (257, mels)
    np.testing.assert_array_equal(ours, fb)
    state = front_end(mels, 160).state_dict()
    np.testing.assert_array_equal(state["torchfbank.2.spectrogram.window"].numpy(), window)
    np.testing.assert_array_equal(state["torchfbank.2.mel_scale.fb"].numpy(), fb)
    assert (fb > 0).sum(axis=0).min() >= 1  # every filter sees at least one bin


@pytest.mark.parametrize("name", list(CLIPS))
def test_mel_power_equals_torchaudio(setup: dict[str, Any], name: str) -> None:
    seconds, mels, hop = CLIPS[name]
    wav, expected = setup["wavs"][name], setup["ref"][f"{name}.power"]
    ours = front_end(mels, hop).power_mel(torch.from_numpy(wav)[None])[0].numpy()
    assert ours.shape == expected.shape == (mels, wav.size // hop + 1)
    assert expected.max() > 1.0
    assert np.abs(ours - expected).max() <= 1e-5 * expected.max()


@pytest.mark.parametrize("name", list(CLIPS))
def test_log_features_equal_torchaudio_normalised(setup: dict[str, Any], name: str) -> None:
    seconds, mels, hop = CLIPS[name]
    wav, expected = setup["wavs"][name], setup["ref"][f"{name}.features"]
    ours = front_end(mels, hop)(torch.from_numpy(wav)[None])[0]
    assert ours.dtype == torch.float32 and ours.shape == expected.shape
    assert np.abs(expected.mean(axis=1)).max() < 1e-4  # normalised over time
    assert expected.std() > 1.0
    np.testing.assert_allclose(ours.numpy(), expected, atol=1e-5, rtol=0)


def test_features_stay_float32_for_a_bfloat16_clip() -> None:
    wav = torch.from_numpy(speechlike(1.0, 7, 16_000))[None].to(torch.bfloat16)
    feats = front_end(72, 160)(wav)
    assert feats.dtype == torch.float32
    expected = front_end(72, 160)(wav.float())
    assert torch.equal(feats, expected)  # the clip is widened first, as MelBanks does


def test_a_clip_shorter_than_half_a_window_is_an_error() -> None:
    with pytest.raises(ValueError, match="too short"):
        front_end(72, 160)(torch.zeros(1, 256))
    assert front_end(72, 160)(torch.zeros(1, 257)).shape == (1, 72, 2)
