"""Decode latents with voxcpm==2.0.3's own AudioVAE (V2), whole and streamed; write the audio.

Executed with .venv-ref-voxcpm's python (never imported by the server):

    .venv-ref-voxcpm/bin/python tools/ref/voxcpm/ref_vae.py CKPT JOB.json OUT

The VAE is built as the reference builds it (``AudioVAEV2(AudioVAEConfigV2(
**config.json["audio_vae_config"]))``, ``audiovae.pth``'s ``state_dict`` loaded strictly,
float32) and decodes at its default output rate.

JOB.json: {"jobs": [{"id", "latents": path.npy float32 [latent_dim, T], "chunks"?: [n, ...]
(streamed decode: ``streaming_decode`` fed these many latents a call, the last size
repeating)}]} -> OUT/<id>.whole.npy and OUT/<id>.streamed.npy (float32 samples);
OUT/result.json: {"results": [{"id", "whole", "streamed"}]}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "stubs"))

from voxcpm.modules.audiovae import AudioVAEConfigV2, AudioVAEV2  # noqa: E402


def main() -> None:
    ckpt, job_path, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    torch.set_num_threads(2)
    job = json.loads(job_path.read_text())
    config = json.loads((ckpt / "config.json").read_text())["audio_vae_config"]
    vae = AudioVAEV2(AudioVAEConfigV2(**config))
    state = torch.load(ckpt / "audiovae.pth", map_location="cpu", weights_only=True)
    vae.load_state_dict(state.get("state_dict", state), strict=True)
    vae = vae.float().eval()
    results = []
    with torch.no_grad():
        for item in job["jobs"]:
            z = torch.from_numpy(np.load(item["latents"]).astype(np.float32))[None]
            whole = vae.decode(z)[0, 0].numpy()
            np.save(out / f"{item['id']}.whole.npy", whole)
            result = {"id": item["id"], "whole": f"{item['id']}.whole.npy"}
            sizes = item.get("chunks")
            if sizes:
                parts, start, turn = [], 0, 0
                with vae.streaming_decode() as dec:
                    while start < z.shape[-1]:
                        n = sizes[min(turn, len(sizes) - 1)]
                        parts.append(dec.decode_chunk(z[..., start : start + n])[0, 0].numpy())
                        start, turn = start + n, turn + 1
                np.save(out / f"{item['id']}.streamed.npy", np.concatenate(parts))
                result["streamed"] = f"{item['id']}.streamed.npy"
            results.append(result)
    (out / "result.json").write_text(json.dumps({"results": results}))


if __name__ == "__main__":
    main()
