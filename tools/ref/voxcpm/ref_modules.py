"""Evaluate voxcpm==2.0.3's own sub-modules on given inputs; write their outputs.

Executed with .venv-ref-voxcpm's python (never imported by the server):

    .venv-ref-voxcpm/bin/python tools/ref/voxcpm/ref_modules.py CKPT JOB.json OUT

The model is built as ``run_reference.py`` builds it (``VoxCPM(CKPT, enable_denoiser=False,
optimize=False)``, CPU). JOB.json: {"patches": path.npy [B, T, P, feat_dim] (through
``feat_encoder``, then ``enc_to_lm_proj``), "hidden": path.npy [N, lm hidden] (through
``fsq_layer``, and the stop head ``stop_head(silu(stop_proj(h)))``)} -> OUT/encoded.npy,
OUT/projected.npy, OUT/quantized.npy, OUT/stop.npy; OUT/result.json lists them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "stubs"))

from voxcpm import VoxCPM  # noqa: E402


def main() -> None:
    ckpt, job_path, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    torch.set_num_threads(2)
    job = json.loads(job_path.read_text())
    model = VoxCPM(
        voxcpm_model_path=str(ckpt), enable_denoiser=False, optimize=False, device="cpu"
    ).tts_model
    files = {}
    with torch.no_grad():
        patches = torch.from_numpy(np.load(job["patches"]))
        encoded = model.feat_encoder(patches)
        files["encoded"] = encoded
        files["projected"] = model.enc_to_lm_proj(encoded)
        hidden = torch.from_numpy(np.load(job["hidden"]))
        files["quantized"] = model.fsq_layer(hidden)
        files["stop"] = model.stop_head(torch.nn.functional.silu(model.stop_proj(hidden)))
    result = {}
    for name, value in files.items():
        np.save(out / f"{name}.npy", value.float().numpy())
        result[name] = f"{name}.npy"
    (out / "result.json").write_text(json.dumps({"results": [{"id": "m", **result}]}))


if __name__ == "__main__":
    main()
