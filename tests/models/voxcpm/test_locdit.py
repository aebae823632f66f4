"""VoxCPM2's local DiT and flow-matching solve against voxcpm==2.0.3's own generation.

The reference runs whole generations on a tiny random checkpoint (seeded) and records, per
patch, the DiT's condition, its previous patch, the initial noise and the patch it made.
Ours solves every recorded step of every job in one batch from the same inputs: each
patch within 1e-4 of the reference's.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from models.voxcpm.config import stack_config
from models.voxcpm.locdit import LocDiT, solve
from tests.models.reference_env import outputs, run_script
from tests.models.voxcpm.ckpt import build
from tests.models.voxcpm.weights import load_prefix

REPO = Path(__file__).resolve().parents[3]
PYTHON = REPO / ".venv-ref-voxcpm" / "bin" / "python"
SCRIPT = REPO / "tools" / "ref" / "voxcpm" / "run_reference.py"
SETUP = "tools/ref/voxcpm/make_venv.sh"
PREFIX = "feat_decoder.estimator."
JOBS = {
    "a": ("Hello there, how are you?", 3, 2.0),
    "b": ("A second and longer sentence for the model to speak.", 4, 2.0),
    "c": ("Short.", 5, 3.5),
}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("voxcpm") / "ckpt", seed=4)


@pytest.fixture(scope="module")
def reference(ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    jobs = [
        {"id": k, "text": text, "seed": seed, "cfg_value": cfg, "max_len": 10, "decode": []}
        for k, (text, seed, cfg) in JOBS.items()
    ]
    out = tmp_path_factory.mktemp("voxcpm-ref")
    return outputs(run_script(PYTHON, SCRIPT, ckpt, {"jobs": jobs}, out, SETUP), out)


def load_locdit(ckpt: Path) -> LocDiT:
    data = json.loads((ckpt / "config.json").read_text())
    cfg, inv_freq = stack_config(data, "dit_config")
    return load_prefix(LocDiT(cfg, data["feat_dim"], inv_freq), ckpt, PREFIX, "local DiT")


def test_patches_equal_the_reference(ckpt: Path, reference: dict) -> None:
    model = load_locdit(ckpt)
    mu, cond, noise, cfg, want = [], [], [], [], []
    for k, (_, _, guidance) in JOBS.items():
        steps = len(reference[f"{k}.patches"])
        assert steps >= 3
        mu.append(reference[f"{k}.mu"])
        cond.append(reference[f"{k}.cond"])
        noise.append(reference[f"{k}.noise"])
        want.append(reference[f"{k}.patches"])
        cfg += [guidance] * steps
    got = solve(
        model,
        torch.from_numpy(np.concatenate(mu)),
        torch.from_numpy(np.concatenate(cond)),
        torch.from_numpy(np.concatenate(noise)),
        10,
        torch.tensor(cfg),
    )
    theirs = np.concatenate(want)  # [N, patch, feat] patch-major
    ours = got.transpose(1, 2).numpy()
    assert np.abs(theirs).max() > 0.1
    assert np.abs(ours - theirs).max() < 1e-4
