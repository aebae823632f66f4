"""VoxCPM2's local encoder, its projection, the scalar quantizer and the stop head against
voxcpm==2.0.3's own modules on a tiny random checkpoint: within 1e-5."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from models.voxcpm.config import stack_config
from models.voxcpm.locenc import LocEnc, ScalarQuantizer
from tests.models.reference_env import outputs, run_script
from tests.models.voxcpm.ckpt import build
from tests.models.voxcpm.weights import load_prefix

REPO = Path(__file__).resolve().parents[3]
PYTHON = REPO / ".venv-ref-voxcpm" / "bin" / "python"
SCRIPT = REPO / "tools" / "ref" / "voxcpm" / "ref_modules.py"
SETUP = "tools/ref/voxcpm/make_venv.sh"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("voxcpm") / "ckpt", seed=6)


@pytest.fixture(scope="module")
def inputs(ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    data = json.loads((ckpt / "config.json").read_text())
    rng = np.random.default_rng(3)
    width = data["lm_config"]["hidden_size"]
    patches = rng.standard_normal((2, 5, data["patch_size"], data["feat_dim"])).astype(np.float32)
    # Large states: the quantizer's tanh saturates and many values sit on rounding steps.
    hidden = (3 * rng.standard_normal((7, width))).astype(np.float32)
    return {"patches": patches, "hidden": hidden}


@pytest.fixture(scope="module")
def reference(ckpt: Path, inputs: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("voxcpm-modules")
    job = {}
    for name, value in inputs.items():
        np.save(out / f"in-{name}.npy", value)
        job[name] = str(out / f"in-{name}.npy")
    return outputs(run_script(PYTHON, SCRIPT, ckpt, job, out, SETUP), out)


def test_local_encoder_and_projection(ckpt: Path, inputs: dict, reference: dict) -> None:
    data = json.loads((ckpt / "config.json").read_text())
    cfg, inv_freq = stack_config(data, "encoder_config")
    enc = load_prefix(
        LocEnc(cfg, data["feat_dim"], inv_freq), ckpt, "feat_encoder.", "local encoder"
    )
    proj = load_prefix(
        nn.Linear(cfg.hidden_size, data["lm_config"]["hidden_size"]),
        ckpt,
        "enc_to_lm_proj.",
        "projection",
    )
    with torch.no_grad():
        encoded = enc(torch.from_numpy(inputs["patches"]))
        projected = proj(encoded)
    assert np.abs(encoded.numpy() - reference["m.encoded"]).max() < 1e-5
    assert np.abs(projected.numpy() - reference["m.projected"]).max() < 1e-5


def test_quantizer_and_stop_head(ckpt: Path, inputs: dict, reference: dict) -> None:
    data = json.loads((ckpt / "config.json").read_text())
    width = data["lm_config"]["hidden_size"]
    fsq = ScalarQuantizer(
        width, data["scalar_quantization_latent_dim"], data["scalar_quantization_scale"]
    )
    fsq = load_prefix(fsq, ckpt, "fsq_layer.", "scalar quantizer")
    stop_proj = load_prefix(nn.Linear(width, width), ckpt, "stop_proj.", "stop projection")
    stop_head = load_prefix(nn.Linear(width, 2, bias=False), ckpt, "stop_head.", "stop head")
    hidden = torch.from_numpy(inputs["hidden"])
    with torch.no_grad():
        quantized = fsq(hidden)
        stop = stop_head(nn.functional.silu(stop_proj(hidden)))
    assert np.abs(quantized.numpy() - reference["m.quantized"]).max() < 1e-5
    assert np.abs(stop.numpy() - reference["m.stop"]).max() < 1e-5
