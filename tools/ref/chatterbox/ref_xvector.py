"""Run the reference speaker x-vector path (chatterbox-tts==0.1.7) on clips: CAM++,
its Kaldi filterbank, and the resampling ``S3Gen.embed_ref`` does.

Executed with .venv-ref-chatterbox's python (never imported by the server):

    .venv-ref-chatterbox/bin/python tools/ref/chatterbox/ref_xvector.py CKPT JOB.json OUT

The filterbank and the resampler are torchaudio's own (installed in the reference env
by make_venv.sh), reached through the reference's modules as they call them. CAM++ is
built as S3Gen builds it (``CAMPPlus(memory_efficient=False)``) and given the
``speaker_encoder.*`` tensors of CKPT/s3gen_meanflow.safetensors strictly, in eval mode.

JOB.json: {"tasks": [TASK, ...]}; each TASK has "kind" and "id", and "wav" (the path
of a float32 .npy clip, 1-D):
- {"kind": "xvector", "id", "wav", "sr"? (16000)} -> OUT/<id>.xvector.npy float32
   [192]: ``speaker_encoder.inference(wav16[None])``, where wav16 is the clip, first
   resampled to 16 kHz by ``get_resampler(sr, 16000)`` when "sr" is another rate (as
   ``embed_ref`` does; no checkpoint needed for the other kinds)
- {"kind": "fbank", "id", "wav"} -> OUT/<id>.fbank.npy float32 [frames, 80]:
   ``torchaudio.compliance.kaldi.fbank(wav[None], num_mel_bins=80)`` as xvector.py
   calls it; and OUT/<id>.features.npy: what ``extract_feature`` hands CAM++ (the same,
   each bin's mean over the clip subtracted)
- {"kind": "resample", "id", "wav", "orig_sr"? (24000), "new_sr"? (16000)}
   -> OUT/<id>.wav.npy float32: ``get_resampler(orig_sr, new_sr, "cpu")(wav[None])[0]``,
   the cached ``torchaudio.transforms.Resample`` of s3gen.py
OUT/result.json lists what was written, and the torchaudio version used.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jobs  # first: the reference's environment
import numpy as np
import torch
from safetensors.torch import load_file

PREFIX = "speaker_encoder."
S3_SR = 16_000


def real_torchaudio() -> str:
    """The installed torchaudio's version; exits if only a stand-in is importable."""
    import torchaudio

    version = getattr(torchaudio, "__version__", None)
    if version is None or not hasattr(torchaudio, "transforms"):
        raise SystemExit(
            f"torchaudio at {torchaudio.__file__} is not the real package "
            "(rebuild the env: tools/ref/chatterbox/make_venv.sh)"
        )
    return version


@cache
def build_campplus(ckpt: Path):  # noqa: ANN201 (a reference object)
    from chatterbox.models.s3gen.xvector import CAMPPlus

    state = load_file(str(ckpt / "s3gen_meanflow.safetensors"))
    sub = {k[len(PREFIX) :]: v for k, v in state.items() if k.startswith(PREFIX)}
    model = CAMPPlus(memory_efficient=False)  # as S3Token2Mel builds it
    model.load_state_dict(sub, strict=True)
    return model.eval()


def load_wav(task: dict) -> torch.Tensor:
    wav = np.load(task["wav"]).astype(np.float32)
    if wav.ndim != 1:
        raise SystemExit(f"{task['id']}: a clip is 1-D, got shape {wav.shape}")
    return torch.from_numpy(wav)


def run_xvector(model, task: dict, out: Path) -> dict:  # noqa: ANN001
    from chatterbox.models.s3gen.s3gen import get_resampler

    wav = load_wav(task)[None]
    sr = int(task.get("sr", S3_SR))
    with torch.inference_mode():
        if sr != S3_SR:
            wav = get_resampler(sr, S3_SR, torch.device("cpu"))(wav)
        xvector = model.inference(wav.to(torch.float32))
    path = out / f"{task['id']}.xvector.npy"
    np.save(path, xvector.reshape(-1).float().numpy())
    return {"id": task["id"], "xvector": path.name}


def run_fbank(task: dict, out: Path) -> dict:
    from chatterbox.models.s3gen.xvector import Kaldi, extract_feature

    wav = load_wav(task)
    with torch.inference_mode():
        fbank = Kaldi.fbank(wav.unsqueeze(0), num_mel_bins=80)  # as extract_feature calls it
        features, _, _ = extract_feature(wav[None])
    found = {"id": task["id"]}
    for name, value in (("fbank", fbank), ("features", features[0])):
        path = out / f"{task['id']}.{name}.npy"
        np.save(path, value.float().numpy())
        found[name] = path.name
    return found


def run_resample(task: dict, out: Path) -> dict:
    from chatterbox.models.s3gen.s3gen import get_resampler

    wav = load_wav(task)[None]
    orig_sr, new_sr = int(task.get("orig_sr", 24_000)), int(task.get("new_sr", S3_SR))
    with torch.inference_mode():
        resampled = get_resampler(orig_sr, new_sr, torch.device("cpu"))(wav)
    path = out / f"{task['id']}.wav.npy"
    np.save(path, resampled[0].float().numpy())
    return {"id": task["id"], "wav": path.name}


if __name__ == "__main__":
    jobs.run(
        {
            "xvector": lambda task, job: run_xvector(build_campplus(job.ckpt), task, job.out),
            "fbank": lambda task, job: run_fbank(task, job.out),
            "resample": lambda task, job: run_resample(task, job.out),
        },
        report=lambda: {"torchaudio": real_torchaudio()},
    )
