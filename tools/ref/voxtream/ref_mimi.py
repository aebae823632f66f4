"""Run the reference Mimi (moshi==0.2.13 in .venv-ref-voxtream) on a checkpoint file.

Executed with .venv-ref-voxtream's python (never imported by the server):

    .venv-ref-voxtream/bin/python tools/ref/voxtream/ref_mimi.py CKPT JOB.json OUT

CKPT is a Mimi safetensors file in Kyutai's layout; it is loaded as VoXtream loads
its codec: ``moshi.models.loaders.get_mimi(CKPT, mimi_config, "cpu", num_codebooks)``
(a strict ``load_state_dict``), with JOB's "mimi_config" (the dict ``get_mimi``
takes: the tests' tiny sizes) and "num_codebooks".

JOB.json: {"mimi_config": {...}, "num_codebooks": K, "tasks": [TASK, ...]}; each TASK
has "kind" and "id":
- {"kind": "decode", "codes" (path of an int64 .npy [B, K, T])}
  -> OUT/<id>.audio.npy float32 [B, T * 1920]: ``mimi.decode(codes)``
- {"kind": "stream", "codes", "chunks" ([n, ...] frames per call, summing to T)}
  -> OUT/<id>.audio.npy float32 [B, T * 1920]: ``with mimi.streaming(B)``, one
  ``mimi.decode`` per chunk (as VoXtream's generator decodes, one frame a call),
  the outputs concatenated
- {"kind": "encode", "audio" (path of a float32 .npy [B, samples] at 24 kHz)}
  -> OUT/<id>.codes.npy int64 [B, K, ceil(samples / 1920)]: ``mimi.encode``
- {"kind": "keys", "mimi_config"?} -> {keys: {key: [shape, dtype]}}: the state dict of
  a Mimi built on the meta device at the task's config (the published one when absent)
OUT/result.json: {"results": [...]} in task order.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE / "stubs"))  # sphn, bitsandbytes, sounddevice: imported, never called
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("NO_CUDA_GRAPH", "1")
warnings.filterwarnings("ignore")


def main() -> None:
    import numpy as np
    import torch
    from moshi.models import loaders

    ckpt, job_path, out = (Path(arg) for arg in sys.argv[1:4])
    torch.set_num_threads(int(os.environ.get("REF_THREADS", "2")))
    job = json.loads(job_path.read_text())
    out.mkdir(parents=True, exist_ok=True)
    tasks = job["tasks"]
    mimi = None
    if any(t["kind"] != "keys" for t in tasks):
        mimi = loaders.get_mimi(
            str(ckpt), job["mimi_config"], device="cpu", num_codebooks=job["num_codebooks"]
        )
    results = []
    for task in tasks:
        kind, name = task["kind"], task["id"]
        if kind == "keys":
            config = task.get("mimi_config")
            with torch.device("meta"):
                meta = loaders.get_mimi(None, config, device="meta")
            keys = {k: [list(v.shape), str(v.dtype)] for k, v in meta.state_dict().items()}
            results.append({"id": name, "keys": keys})
        elif kind == "decode":
            codes = torch.from_numpy(np.load(task["codes"]))
            with torch.no_grad():
                audio = mimi.decode(codes)
            np.save(out / f"{name}.audio.npy", audio[:, 0].float().numpy())
            results.append({"id": name, "audio": f"{name}.audio.npy"})
        elif kind == "stream":
            codes = torch.from_numpy(np.load(task["codes"]))
            pieces, start = [], 0
            with torch.no_grad(), mimi.streaming(codes.shape[0]):
                for n in task["chunks"]:
                    pieces.append(mimi.decode(codes[:, :, start : start + n]))
                    start += n
            if start != codes.shape[-1]:
                raise SystemExit(f"{name}: chunks sum to {start}, codes have {codes.shape[-1]}")
            audio = torch.cat(pieces, dim=-1)
            np.save(out / f"{name}.audio.npy", audio[:, 0].float().numpy())
            results.append({"id": name, "audio": f"{name}.audio.npy"})
        elif kind == "encode":
            audio = torch.from_numpy(np.load(task["audio"]))
            with torch.no_grad():
                codes = mimi.encode(audio[:, None])
            np.save(out / f"{name}.codes.npy", codes.long().numpy())
            results.append({"id": name, "codes": f"{name}.codes.npy"})
        else:
            raise SystemExit(f"unknown task kind {kind!r}; known: keys, decode, stream, encode")
    (out / "result.json").write_text(json.dumps({"results": results}))


if __name__ == "__main__":
    main()
