"""VoxCPM2's AudioVAE decoder against voxcpm==2.0.3's own, on a tiny random checkpoint.

The reference (``.venv-ref-voxcpm``, built by ``make test``) decodes random latents whole
and streamed (its stateful ``streaming_decode``); ours decodes them whole and in windows
with :data:`models.blocks.audiovae.LEFT_CONTEXT` latents of left context, batched:
within 1e-4 of the reference's whole decode either way. Loading is strict: a file
missing a tensor, with an extra one or a wrong shape is refused naming the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from models.blocks.audiovae import (
    LEFT_CONTEXT,
    AudioVAEConfig,
    decode_windows,
    load_audiovae_decoder,
)
from models.checkpoint import CheckpointError
from tests.models.reference_env import outputs, run_script
from tests.models.voxcpm.ckpt import build

REPO = Path(__file__).resolve().parents[3]
PYTHON = REPO / ".venv-ref-voxcpm" / "bin" / "python"
SCRIPT = REPO / "tools" / "ref" / "voxcpm" / "ref_vae.py"
SETUP = "tools/ref/voxcpm/make_venv.sh"
LENGTHS = {"short": 3, "long": 61}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("voxcpm") / "ckpt", seed=2)


@pytest.fixture(scope="module")
def cfg(ckpt: Path) -> AudioVAEConfig:
    return AudioVAEConfig.from_json(
        json.loads((ckpt / "config.json").read_text())["audio_vae_config"]
    )


@pytest.fixture(scope="module")
def latents(cfg: AudioVAEConfig, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    rng = np.random.default_rng(5)
    folder = tmp_path_factory.mktemp("latents")
    paths = {}
    for name, n in LENGTHS.items():
        paths[name] = folder / f"{name}.npy"
        np.save(paths[name], rng.standard_normal((cfg.latent_dim, n)).astype(np.float32))
    return paths


@pytest.fixture(scope="module")
def reference(ckpt: Path, latents: dict[str, Path], tmp_path_factory) -> dict:
    jobs = [{"id": name, "latents": str(path), "chunks": [1, 4]} for name, path in latents.items()]
    out = tmp_path_factory.mktemp("vae-ref")
    return outputs(run_script(PYTHON, SCRIPT, ckpt, {"jobs": jobs}, out, SETUP), out)


def test_whole_decode_equals_the_reference(ckpt, cfg, latents, reference) -> None:
    decoder = load_audiovae_decoder(ckpt / "audiovae.pth", cfg)
    for name, path in latents.items():
        z = torch.from_numpy(np.load(path))[None]
        with torch.no_grad():
            ours = decoder(z)[0, 0].numpy()
        theirs = reference[f"{name}.whole"]
        assert ours.shape == theirs.shape == (LENGTHS[name] * cfg.samples_per_latent,)
        assert np.abs(theirs).max() > 0.01
        assert np.abs(ours - theirs).max() < 1e-4


def test_windows_with_left_context_equal_whole_decoding(ckpt, cfg, latents, reference) -> None:
    """Chunks of 4 latents (a patch), each with LEFT_CONTEXT latents before it, batched:
    the whole sequence's audio (and the reference's own streamed decode agrees)."""
    decoder = load_audiovae_decoder(ckpt / "audiovae.pth", cfg)
    z = torch.from_numpy(np.load(latents["long"]))
    windows, lefts = [], []
    for start in range(0, z.shape[-1], 4):
        lo = max(0, start - LEFT_CONTEXT)
        windows.append(z[:, lo : start + 4])
        lefts.append(start - lo)
    with torch.no_grad():
        audio = torch.cat(decode_windows(decoder, windows, lefts)).numpy()
    whole = reference["long.whole"]
    assert np.abs(audio - whole).max() < 1e-4
    assert np.abs(reference["long.streamed"] - whole).max() < 1e-4
    # Less context than the receptive field is not exact: the window size matters.
    short = [z[:, max(0, s - 2) : s + 4] for s in range(0, z.shape[-1], 4)]
    with torch.no_grad():
        cut = torch.cat(
            decode_windows(decoder, short, [min(2, s) for s in range(0, z.shape[-1], 4)])
        ).numpy()
    assert np.abs(cut - whole).max() > 1e-3


def test_loading_is_strict(ckpt: Path, cfg: AudioVAEConfig, tmp_path: Path) -> None:
    data = torch.load(ckpt / "audiovae.pth", weights_only=True)
    state = dict(data["state_dict"])
    key = next(k for k in state if k.startswith("decoder.model.2.block.1."))
    missing = dict(state)
    del missing[key]
    torch.save({"state_dict": missing}, tmp_path / "audiovae.pth")
    with pytest.raises(CheckpointError, match="missing tensor"):
        load_audiovae_decoder(tmp_path / "audiovae.pth", cfg)
    extra = dict(state)
    extra["decoder.model.99.weight"] = torch.zeros(1)
    torch.save({"state_dict": extra}, tmp_path / "audiovae.pth")
    with pytest.raises(CheckpointError, match="unexpected tensor"):
        load_audiovae_decoder(tmp_path / "audiovae.pth", cfg)
    (tmp_path / "audiovae.pth").write_bytes(b"not a torch file")
    with pytest.raises(CheckpointError, match="not a readable torch file"):
        load_audiovae_decoder(tmp_path / "audiovae.pth", cfg)


def test_the_vocoder_streams_what_whole_decoding_makes(ckpt, cfg, latents, reference) -> None:
    """Patches (rows of 4 latents) through the Vocoder in chunks of 1, 2 and 4 patches,
    each with the left context it asks for: the reference's whole decode."""
    from models.base import DecodeItem
    from models.voxcpm.vocoder import AudioVAEVocoder

    vocoder = AudioVAEVocoder(load_audiovae_decoder(ckpt / "audiovae.pth", cfg), 4)
    z = np.load(latents["long"])[:, :60]  # 15 whole patches
    frames = z.T.reshape(-1, 4 * cfg.latent_dim)  # patch-major rows
    audio, start = [], 0
    for size in (1, 2, 4, 4, 4):
        lo = max(0, start - vocoder.left_context)
        item = DecodeItem(vocoder.new_stream(), frames[lo : start + size], start - lo)
        audio.append(vocoder.decode([item])[0])
        start += size
    got = np.concatenate(audio)
    assert got.shape == (60 * cfg.samples_per_latent,)
    assert np.abs(got - reference["long.whole"][: got.shape[0]]).max() < 1e-4
