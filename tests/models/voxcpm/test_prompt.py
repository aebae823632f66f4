"""VoxCPM2's prefill sequence in its four modes equals the reference's (ids, masks and
patches the reference's model received), built from our tokenizer and the reference's
own encoded prompt audio."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile

from models.voxcpm.prompt import build_prefill
from models.voxcpm.text import VoxCPMText
from tests.models.reference_env import outputs, run_script
from tests.models.voxcpm.ckpt import build

REPO = Path(__file__).resolve().parents[3]
PYTHON = REPO / ".venv-ref-voxcpm" / "bin" / "python"
SCRIPT = REPO / "tools" / "ref" / "voxcpm" / "run_reference.py"
SETUP = "tools/ref/voxcpm/make_venv.sh"
TARGET = "The weather is lovely today."
PROMPT_TEXT = "This is what I said."


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("voxcpm") / "ckpt", seed=3)


@pytest.fixture(scope="module")
def reference(ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("voxcpm-prompt")
    t = np.arange(int(1.3 * 24000)) / 24000
    wav = 0.3 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2
    soundfile.write(out / "voice.wav", wav.astype(np.float32), 24000)
    base = {"text": TARGET, "seed": 1, "max_len": 3, "decode": []}
    voice = str(out / "voice.wav")
    jobs = [
        {"id": "zero", **base},
        {"id": "ref", "reference_wav": voice, **base},
        {"id": "cont", "prompt_wav": voice, "prompt_text": PROMPT_TEXT, **base},
        {
            "id": "both",
            "reference_wav": voice,
            "prompt_wav": voice,
            "prompt_text": PROMPT_TEXT,
            **base,
        },
    ]
    return outputs(run_script(PYTHON, SCRIPT, ckpt, {"jobs": jobs}, out, SETUP), out)


@pytest.mark.parametrize("job", ["zero", "ref", "cont", "both"])
def test_prefill_equals_the_reference(ckpt: Path, reference: dict, job: str) -> None:
    text = VoxCPMText(ckpt)
    joined = PROMPT_TEXT + TARGET if job in ("cont", "both") else TARGET
    feats = reference[f"{job}.feats"]
    got = build_prefill(
        text.ids(joined),
        feats.shape[1],
        feats.shape[2],
        reference=reference.get(f"{job}.ref_latents") if job in ("ref", "both") else None,
        prompt=reference.get(f"{job}.prompt_latents") if job in ("cont", "both") else None,
    )
    assert got.tokens.tolist() == reference[f"{job}.tokens"].tolist()
    assert got.text_mask.tolist() == reference[f"{job}.text_mask"].tolist()
    assert got.audio_mask.tolist() == reference[f"{job}.audio_mask"].tolist()
    assert np.array_equal(got.feats, feats)


@pytest.mark.parametrize(
    ("job", "kind", "side"), [("ref", "ref", "right"), ("cont", "prompt", "left")]
)
def test_prompt_audio_encodes_as_the_reference(
    ckpt: Path, reference: dict, job: str, kind: str, side: str
) -> None:
    """The 16 kHz clip the reference read, padded to whole patches (a reference on the
    right, a continuation prompt on the left) and encoded: the reference's patches."""
    import json

    import torch

    from models.blocks.audiovae import AudioVAEConfig, load_audiovae_encoder

    data = json.loads((ckpt / "config.json").read_text())
    cfg = AudioVAEConfig.from_json(data["audio_vae_config"])
    encoder = load_audiovae_encoder(ckpt / "audiovae.pth", cfg)
    wav = torch.from_numpy(reference[f"{job}.{kind}_wav16k"])
    patch = data["patch_size"] * encoder.hop
    pad = -len(wav) % patch
    wav = torch.nn.functional.pad(wav, (0, pad) if side == "right" else (pad, 0))
    with torch.no_grad():
        latents = encoder(wav[None])[0]
    patches = latents.view(latents.shape[0], -1, data["patch_size"]).permute(1, 2, 0).numpy()
    theirs = reference[f"{job}.{kind}_latents"]
    assert patches.shape == theirs.shape and len(theirs) >= 2
    assert np.abs(patches - theirs).max() < 1e-4
