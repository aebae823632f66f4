"""Our voice encoder and loudness normalisation against the reference's, on random weights.

The reference (``tools/ref/chatterbox/ref_voice.py`` in .venv-ref-chatterbox) loads
the same random ``ve.safetensors`` strictly, so its format is checked too. Clips
are noise-modulated harmonic tones at 16 kHz, chosen so that the window logic
takes each path: one short window zero-padded (1.3 s), the mel cut to whole
windows (5 s with quiet ends trimmed, 12 s), and a last window added by the 80%
coverage rule and padded (8 s with a quiet start trimmed). fp32 throughout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from models.chatterbox.checkpoint import CheckpointError
from models.chatterbox.loudness import normalize_loudness
from models.chatterbox.voice_encoder import (
    VE_FILE,
    load_voice_encoder,
    melspectrogram,
    speaker_embedding,
    trim_silence,
    window_count,
)
from tests.models.chatterbox.ckpt_ve import build_ve, ve_tensors
from tests.models.chatterbox.reference import REPO, run_reference

RUNNER = REPO / "tools" / "ref" / "chatterbox" / "ref_voice.py"

# name: (seconds, seed, quiet lead-in s, quiet tail s)
CLIPS = {
    "short": (1.3, 1, 0.0, 0.0),
    "trimmed": (5.0, 2, 0.4, 0.6),
    "long": (12.0, 3, 0.0, 0.0),
    "covered": (8.0, 5, 0.3, 0.0),
}


def clip(seconds: float, seed: int, lead: float = 0.0, tail: float = 0.0, sr: int = 16000):
    """A voiced-like float32 clip: six harmonics of a wobbling pitch under a
    noise-driven envelope, light noise, ``lead``/``tail`` seconds 54 dB quieter."""
    rng = np.random.default_rng(seed)
    n = int(round(seconds * sr))
    t = np.arange(n) / sr
    f0 = 110 + 60 * rng.random() + 35 * np.sin(2 * np.pi * (0.5 + rng.random()) * t)
    phase = 2 * np.pi * np.cumsum(f0) / sr
    tone = sum(np.sin(h * phase + 6.3 * rng.random()) / h for h in range(1, 7))
    env = np.convolve(np.abs(rng.normal(size=n)), np.ones(800) / 800, mode="same")
    env = np.convolve(env, np.ones(1600) / 1600, mode="same")
    env *= 1 + 0.8 * np.sin(2 * np.pi * 3 * t)
    wav = 0.25 * env * tone + 0.01 * rng.normal(size=n)
    wav[(t < lead) | (t >= seconds - tail)] *= 0.002
    return wav.astype(np.float32)


def run_ref_voice(checkpoint: Path, job: dict[str, Any], out: Path) -> dict[str, Any]:
    return run_reference(checkpoint, job, out, RUNNER)


def loudness_cases() -> dict[str, tuple[np.ndarray, int, float]]:
    """name: (wav, sample rate, target LUFS)."""
    return {
        "speech24k": (clip(6.0, 11, 0.2, 0.5, sr=24000), 24000, -27.0),
        "quiet16k": (0.01 * clip(5.5, 12, sr=16000), 16000, -27.0),
        "target20": (clip(3.0, 13, sr=24000), 24000, -20.0),
        "too_short": (clip(0.3, 14, sr=24000), 24000, -27.0),  # under one 400 ms block
        "silence": (np.zeros(48000, np.float32), 24000, -27.0),  # -inf LUFS
    }


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("ve")
    ckpt = build_ve(root / "ckpt", seed=7)
    tasks = []
    for name, spec in CLIPS.items():
        np.save(root / f"{name}.npy", clip(*spec))
        for kind in ("embed", "mel"):
            tasks.append({"kind": kind, "id": name, "wav": str(root / f"{name}.npy")})
    for name, (wav, sr, target) in loudness_cases().items():
        np.save(root / f"loud_{name}.npy", wav)
        tasks.append(
            {
                "kind": "loudness",
                "id": f"loud_{name}",
                "wav": str(root / f"loud_{name}.npy"),
                "sample_rate": sr,
                "target_lufs": target,
            }
        )
    return ckpt, run_ref_voice(ckpt, {"tasks": tasks}, root / "ref")


def test_clips_take_every_window_path() -> None:
    """The clips cover padding one window, cutting to whole windows, and the
    coverage rule adding a padded last window (so parity covers all three)."""
    seen = {}
    for name, spec in CLIPS.items():
        frames = melspectrogram(trim_silence(clip(*spec))).shape[0]
        seen[name] = (frames, *window_count(frames))
    assert seen["short"][1:] == (1, 160) and seen["short"][0] < 160
    assert seen["trimmed"][0] < 5 * 100 and seen["trimmed"][2] < seen["trimmed"][0]
    assert seen["long"][2] < seen["long"][0]
    assert seen["covered"][2] > seen["covered"][0] > 160


def test_mel_matches_reference(setup: tuple[Path, dict[str, Any]]) -> None:
    _, ref = setup
    for name, spec in CLIPS.items():
        ours = melspectrogram(trim_silence(clip(*spec)))
        theirs = ref[f"{name}.mel"]
        assert ours.shape == theirs.shape, name
        rel = np.abs(ours - theirs).max() / np.abs(theirs).max()
        assert rel < 1e-6, (name, rel)


def test_embedding_matches_reference(setup: tuple[Path, dict[str, Any]]) -> None:
    ckpt, ref = setup
    encoder = load_voice_encoder(ckpt, torch.device("cpu"), torch.float32)
    for name, spec in CLIPS.items():
        ours = speaker_embedding(encoder, clip(*spec))
        theirs = ref[f"{name}.embedding"]
        assert ours.dtype == np.float32 and ours.shape == (256,)
        assert abs(float(np.linalg.norm(ours)) - 1.0) < 1e-5
        err = float(np.abs(ours - theirs).max())
        assert err < 1e-5, (name, err)


def test_loudness_matches_reference(setup: tuple[Path, dict[str, Any]]) -> None:
    _, ref = setup
    for name, (wav, sr, target) in loudness_cases().items():
        ours = normalize_loudness(wav, sr, target_lufs=target)
        theirs = ref[f"loud_{name}.wav"]
        assert ours.dtype == theirs.dtype == np.float32, name
        err = float(np.abs(ours - theirs).max())
        assert err < 1e-6, (name, err)
        if name in ("too_short", "silence"):
            np.testing.assert_array_equal(ours, wav)
        else:
            assert not np.array_equal(ours, wav), name


def test_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=VE_FILE):
        load_voice_encoder(tmp_path, torch.device("cpu"), torch.float32)


def test_missing_or_misshapen_tensor_names_it(tmp_path: Path) -> None:
    state = ve_tensors(seed=1)
    del state["proj.bias"]
    save_file(state, str(tmp_path / VE_FILE))
    with pytest.raises(CheckpointError, match="proj.bias"):
        load_voice_encoder(tmp_path, torch.device("cpu"), torch.float32)
    state = ve_tensors(seed=1)
    state["lstm.weight_hh_l2"] = state["lstm.weight_hh_l2"][:, :128].contiguous()
    save_file(state, str(tmp_path / VE_FILE))
    with pytest.raises(CheckpointError, match="lstm.weight_hh_l2"):
        load_voice_encoder(tmp_path / VE_FILE, torch.device("cpu"), torch.float32)
