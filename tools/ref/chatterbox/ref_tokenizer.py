"""Run the reference S3 speech tokenizer (chatterbox-tts==0.1.7) on 16 kHz clips.

Executed with .venv-ref-chatterbox's python (never imported by the server):

    .venv-ref-chatterbox/bin/python tools/ref/chatterbox/ref_tokenizer.py CKPT JOB.json OUT

The tokenizer is built as S3Gen builds it (``S3Tokenizer("speech_tokenizer_v2_25hz")``)
and given the ``tokenizer.*`` tensors of CKPT/s3gen_meanflow.safetensors strictly
(only the mel filterbank and window, which its class declares ignorable, may be
absent: then its own stay).

JOB.json: {"tasks": [TASK, ...]}; each TASK has "kind" and "id":
- {"kind": "tokens", "id", "wavs" (paths of float32 .npy clips at 16 kHz),
   "max_len"? (int or null), "dump"? (bool)} -> OUT/<id>.tokens.npy int64 [B, T] and
   OUT/<id>.lengths.npy int64 [B]: ``S3Tokenizer.forward(clips, max_len=...)``; with
   "dump", also what its own modules computed on the way: OUT/<id>.mel.npy (the padded
   log-mel batch handed to ``quantize``), OUT/<id>.hidden.npy (the encoder's output,
   [W, T, 1280]) and OUT/<id>.projected.npy (FSQ's projection before tanh and rounding,
   [W, T, 8]); W is the batch, or the 30 s windows when a clip is over 30 s.
- {"kind": "buffers", "id"} -> OUT/<id>.mel_filters.npy and OUT/<id>.window.npy as a
   fresh ``S3Tokenizer`` computes them (librosa's filters), before any checkpoint.
OUT/result.json lists what was written.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jobs  # first: the reference's environment
import numpy as np
import torch
from safetensors.torch import load_file

PREFIX = "tokenizer."


def fresh_tokenizer():  # noqa: ANN201 (a reference object)
    from chatterbox.models.s3tokenizer import S3Tokenizer

    return S3Tokenizer("speech_tokenizer_v2_25hz")


@cache
def build_tokenizer(ckpt: Path):  # noqa: ANN201 (a reference object)
    state = load_file(str(ckpt / "s3gen_meanflow.safetensors"))
    sub = {k[len(PREFIX) :]: v for k, v in state.items() if k.startswith(PREFIX)}
    tokenizer = fresh_tokenizer()
    result = tokenizer.load_state_dict(sub, strict=False)
    ignorable = set(tokenizer.ignore_state_dict_missing)
    missing = [k for k in result.missing_keys if k not in ignorable]
    if missing or result.unexpected_keys:
        raise SystemExit(
            f"tokenizer tensors do not match: missing {missing[:5]}, "
            f"unexpected {list(result.unexpected_keys)[:5]}"
        )
    return tokenizer.eval()


def run_tokens(tokenizer, task: dict, out: Path) -> dict:  # noqa: ANN001
    wavs = [np.load(path).astype(np.float32) for path in task["wavs"]]
    dumps: dict[str, list[torch.Tensor]] = {"mel": [], "hidden": [], "projected": []}
    handles = []
    if task.get("dump"):
        quantize = tokenizer.quantize

        def spy_quantize(mel, mel_len):  # noqa: ANN001, ANN202
            dumps["mel"].append(mel.detach().clone())
            return quantize(mel, mel_len)

        tokenizer.quantize = spy_quantize
        handles = [
            tokenizer.encoder.register_forward_hook(
                lambda _m, _i, output: dumps["hidden"].append(output[0].detach().clone())
            ),
            tokenizer.quantizer._codebook.project_down.register_forward_hook(
                lambda _m, _i, output: dumps["projected"].append(output.detach().clone())
            ),
        ]
    try:
        tokens, lengths = tokenizer.forward(wavs, max_len=task.get("max_len"))
    finally:
        for handle in handles:
            handle.remove()
        tokenizer.__dict__.pop("quantize", None)
    found = {"id": task["id"]}
    arrays = {"tokens": tokens.numpy().astype(np.int64), "lengths": lengths.numpy()}
    if task.get("dump"):
        hidden = dumps["hidden"][0]
        arrays["mel"] = dumps["mel"][0].float().numpy()
        arrays["hidden"] = hidden.float().numpy()
        arrays["projected"] = dumps["projected"][0].reshape(*hidden.shape[:2], -1).float().numpy()
    for name, value in arrays.items():
        path = out / f"{task['id']}.{name}.npy"
        np.save(path, value.astype(np.int64) if name == "lengths" else value)
        found[name] = path.name
    return found


def run_buffers(task: dict, out: Path) -> dict:
    tokenizer = fresh_tokenizer()
    found = {"id": task["id"]}
    for name, value in (("mel_filters", tokenizer._mel_filters), ("window", tokenizer.window)):
        path = out / f"{task['id']}.{name}.npy"
        np.save(path, value.numpy())
        found[name] = path.name
    return found


if __name__ == "__main__":
    jobs.run(
        {
            "tokens": lambda task, job: run_tokens(build_tokenizer(job.ckpt), task, job.out),
            "buffers": lambda task, job: run_buffers(task, job.out),
        }
    )
