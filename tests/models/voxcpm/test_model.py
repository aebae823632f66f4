"""VoxCPM2's network, one context at a time, against voxcpm==2.0.3's own generation.

From the reference's own prefill sequence and initial noises (recorded by
``tools/ref/voxcpm/run_reference.py``, seeded, on a tiny random checkpoint), ours
generates every patch within 1e-4 of the reference's and stops at the same step.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from models.voxcpm.model import VoxCPMModel
from tests.models.reference_env import outputs, run_script
from tests.models.voxcpm.ckpt import build
from tests.models.voxcpm.weights import load_prefix

REPO = Path(__file__).resolve().parents[3]
PYTHON = REPO / ".venv-ref-voxcpm" / "bin" / "python"
SCRIPT = REPO / "tools" / "ref" / "voxcpm" / "run_reference.py"
SETUP = "tools/ref/voxcpm/make_venv.sh"
JOBS = {
    "a": ("Hello there, how are you?", 3, 2.0),
    "b": ("A second and longer sentence for the model to speak today.", 4, 2.0),
    "c": ("Short.", 5, 3.0),
}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("voxcpm") / "ckpt", seed=8)


@pytest.fixture(scope="module")
def reference(ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    jobs = [
        {"id": k, "text": text, "seed": seed, "cfg_value": cfg, "max_len": 12, "decode": []}
        for k, (text, seed, cfg) in JOBS.items()
    ]
    out = tmp_path_factory.mktemp("voxcpm-ref")
    return outputs(run_script(PYTHON, SCRIPT, ckpt, {"jobs": jobs}, out, SETUP), out)


def load_model(ckpt: Path) -> VoxCPMModel:
    model = VoxCPMModel(json.loads((ckpt / "config.json").read_text()))
    return load_prefix(model, ckpt, "", "VoxCPM2")


@pytest.mark.parametrize("job", list(JOBS))
def test_patches_and_stop_equal_the_reference(ckpt: Path, reference: dict, job: str) -> None:
    model = load_model(ckpt)
    noise = torch.from_numpy(reference[f"{job}.noise"])
    made = list(
        model.generate(
            torch.from_numpy(reference[f"{job}.tokens"]),
            torch.from_numpy(reference[f"{job}.text_mask"]).float(),
            torch.from_numpy(reference[f"{job}.feats"]),
            torch.from_numpy(reference[f"{job}.audio_mask"]).float(),
            lambda i: noise[i],
            reference[f"{job}.max_len"],
            cfg=JOBS[job][2],
        )
    )
    patches = torch.stack([p for p, _ in made]).numpy()
    theirs = reference[f"{job}.patches"]
    assert patches.shape == theirs.shape and len(theirs) >= 3
    assert np.abs(theirs).max() > 0.1
    assert np.abs(patches - theirs).max() < 1e-4
    stops = torch.stack([s for _, s in made]).numpy()
    assert np.abs(stops - reference[f"{job}.stop_logits"]).max() < 1e-4
