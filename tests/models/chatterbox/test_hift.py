"""Our HiFT vocoder against the reference's ``mel2wav.inference``: the same audio.

Real-size random weights, fp32, one random log-mel of 40 frames. The reference
draws its sine source's phases and noise from torch's global generator; ours
draws the same numbers with ``draw_source_noise`` after the same seed.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from models.blocks.hift import FRAME_SAMPLES, VOICED_THRESHOLD, draw_source_noise, load_hift
from tests.models.chatterbox.ckpt_hift import S3GEN_FILE, build_mel2wav, mel2wav_tensors
from tests.models.chatterbox.reference import run_reference

FRAMES = 40
SEED = 7


def vocode(model: torch.nn.Module, mel: np.ndarray, seed: int) -> np.ndarray:
    torch.manual_seed(seed)
    with torch.inference_mode():
        rand = draw_source_noise(mel.shape[-1], batch=mel.shape[0])
        return model(torch.from_numpy(mel), rand)[0].numpy()


def test_audio_equals_the_reference(tmp_path: Path) -> None:
    ckpt = build_mel2wav(tmp_path / "ckpt", seed=0)
    mel = np.random.default_rng(5).normal(-6.0, 2.0, (1, 80, FRAMES)).astype(np.float32)
    mel_path = tmp_path / "mel.npy"
    np.save(mel_path, mel)
    job = {"tasks": [{"kind": "hift", "id": "h", "mel": str(mel_path), "seed": SEED}]}
    ref = run_reference(ckpt, job, tmp_path / "ref")["h.wav"]

    model = load_hift(load_file(str(ckpt / S3GEN_FILE)))
    ours = vocode(model, mel, SEED)
    assert ours.dtype == np.float32 and ours.shape == ref.shape == (FRAMES * FRAME_SAMPLES,)
    assert np.isfinite(ours).all()
    np.testing.assert_array_less(np.abs(ours - ref).max(), 1e-4)

    # Not a degenerate run: audible, mostly unclipped, both voiced and unvoiced
    # frames in the source, and the random source shows in the audio.
    assert float(np.std(ours)) > 0.01 and np.mean(np.abs(ours) >= 0.99) < 0.01
    with torch.inference_mode():
        f0 = model.f0_predictor(torch.from_numpy(mel))
    voiced = (f0 > VOICED_THRESHOLD).float().mean().item()
    assert 0.0 < voiced < 1.0, voiced
    assert np.abs(vocode(model, mel, SEED + 1) - ref).max() > 1e-3


def test_a_missing_tensor_is_named() -> None:
    state = mel2wav_tensors(seed=1)
    del state["mel2wav.source_resblocks.2.activations2.1.alpha"]
    state["mel2wav.extra.weight"] = torch.zeros(1)
    with pytest.raises(
        ValueError, match=re.escape("mel2wav.source_resblocks.2.activations2.1.alpha")
    ):
        load_hift(state)
    with pytest.raises(ValueError, match=re.escape("mel2wav.extra.weight")):
        load_hift(state)
