"""Run the reference codec (fish-speech==0.1.0's modded DAC) on a checkpoint's codec.pth.

Executed with .venv-ref-fish's python (never imported by the server):

    .venv-ref-fish/bin/python tools/ref/fish_speech/ref_codec.py CKPT JOB.json OUT

The package's hydra config for the codec is not in its wheel, so the codec is built
here from the package's classes with S2 Pro's published hyper-parameters (the
``modded_dac_vq`` config: causal DAC, encoder transformer layers [0, 0, 0, 4],
window-limited causal transformers of 8 layers and window 128 before and after the
quantizer, 1 semantic + 9 residual codebooks), at the sizes JOB.json's "config"
gives (the fields of ``models.blocks.dac.DACConfig``; the tests' tiny sizes).
CKPT/codec.pth is loaded with ``load_state_dict(strict=True)``: S2 Pro's key names
are the ones these classes read (weight norm as stored: parametrizations for the
causal convs, weight_g/weight_v for the quantizer's projections; ``freqs_cis`` and
``causal_mask`` buffers included), so nothing is renamed.

JOB.json: {"config": {...}, "tasks": [TASK, ...]}; each TASK has "kind" and "id":
- {"kind": "keys", "id", "config"?} -> in result.json, the codec's state dict as
  {key: [shape, dtype]}, of a codec built on the meta device at the task's own
  "config" if it has one (S2 Pro's real sizes, say), else the job's
- {"kind": "decode", "id", "codes" (path of an int64 .npy [B, N, T])}
   -> OUT/<id>.audio.npy float32 [B, T * 2048]: ``DAC.decode(codes, lengths)``
- {"kind": "encode", "id", "audio" (path of a float32 .npy [B, samples] at 44.1 kHz)}
   -> OUT/<id>.codes.npy int64 [B, N, T]: ``DAC.encode(audio)``
OUT/result.json: {"results": [...]} in task order.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from functools import partial
from pathlib import Path

warnings.filterwarnings("ignore")


def build(cfg: dict):  # noqa: ANN201 (a reference object)
    from fish_speech.models.dac.modded_dac import DAC, ModelArgs, WindowLimitedTransformer
    from fish_speech.models.dac.rvq import DownsampleResidualVectorQuantize

    latent = cfg["encoder_dim"] * 2 ** len(cfg["encoder_rates"])
    common = dict(
        n_local_heads=-1,
        head_dim=cfg["head_dim"],
        rope_base=cfg["rope_base"],
        norm_eps=cfg["norm_eps"],
        dropout_rate=0.0,
        attn_dropout_rate=0.0,
        channels_first=True,
    )

    def quantizer_transformer() -> WindowLimitedTransformer:
        args = ModelArgs(
            block_size=cfg["quantizer_positions"],
            n_layer=cfg["quantizer_layers"],
            n_head=cfg["quantizer_heads"],
            dim=latent,
            intermediate_size=cfg["quantizer_intermediate"],
            **common,
        )
        return WindowLimitedTransformer(
            causal=True, window_size=cfg["quantizer_window"], input_dim=latent, config=args
        )

    quantizer = DownsampleResidualVectorQuantize(
        input_dim=latent,
        n_codebooks=cfg["residual_codebooks"],
        codebook_size=cfg["codebook_size"],
        codebook_dim=cfg["codebook_dim"],
        quantizer_dropout=0.0,
        downsample_factor=cfg["downsample_factors"],
        post_module=quantizer_transformer(),
        pre_module=quantizer_transformer(),
        semantic_codebook_size=cfg["semantic_codebook_size"],
    )
    return DAC(
        encoder_dim=cfg["encoder_dim"],
        encoder_rates=cfg["encoder_rates"],
        decoder_dim=cfg["decoder_dim"],
        decoder_rates=cfg["decoder_rates"],
        quantizer=quantizer,
        sample_rate=cfg["sample_rate"],
        causal=True,
        encoder_transformer_layers=cfg["encoder_transformer_layers"],
        # As S2 Pro's config (the decoder's are built and never used by the package).
        decoder_transformer_layers=[4, 0, 0, 0],
        transformer_general_config=partial(
            ModelArgs, block_size=cfg["encoder_positions"], **common
        ),
    )


def warm_up(model, cfg: dict) -> None:  # noqa: ANN001 (a reference object)
    """One small decode and encode before the measured ones. On the test machines' CPU
    torch 2.13 now and then computes one thread's share of the first decode of a
    process off by about 2e-4 (ours and the reference's alike, never a later call)."""
    import torch

    codes = torch.zeros(1, 1 + cfg["residual_codebooks"], 2, dtype=torch.long)
    with torch.inference_mode():
        model.decode(codes, torch.tensor([2]))
        model.encode(torch.zeros(1, 1, 2048))


def main() -> None:
    import numpy as np
    import torch

    ckpt, job_path, out = (Path(arg) for arg in sys.argv[1:4])
    torch.set_num_threads(int(os.environ.get("REF_THREADS", "2")))
    job = json.loads(job_path.read_text())
    out.mkdir(parents=True, exist_ok=True)
    tasks = job["tasks"]
    model = None
    if any(t["kind"] != "keys" for t in tasks):
        model = build(job["config"])
        state = torch.load(ckpt / "codec.pth", map_location="cpu", weights_only=True)
        model.load_state_dict(state, strict=True)
        model.eval()
        warm_up(model, job["config"])
    results = []
    for task in tasks:
        kind, name = task["kind"], task["id"]
        if kind == "keys":
            with torch.device("meta"):
                meta = build(task.get("config", job["config"]))
            keys = {k: [list(v.shape), str(v.dtype)] for k, v in meta.state_dict().items()}
            results.append({"id": name, "keys": keys})
        elif kind == "decode":
            codes = torch.from_numpy(np.load(task["codes"]))
            lengths = torch.full((codes.shape[0],), codes.shape[-1], dtype=torch.long)
            with torch.inference_mode():
                audio, _ = model.decode(codes, lengths)
            np.save(out / f"{name}.audio.npy", audio[:, 0].float().numpy())
            results.append({"id": name, "audio": f"{name}.audio.npy"})
        elif kind == "encode":
            audio = torch.from_numpy(np.load(task["audio"]))
            with torch.inference_mode():
                codes, _ = model.encode(audio[:, None])
            np.save(out / f"{name}.codes.npy", codes.long().numpy())
            results.append({"id": name, "codes": f"{name}.codes.npy"})
        else:
            raise SystemExit(f"unknown task kind {kind!r}; known: keys, decode, encode")
    (out / "result.json").write_text(json.dumps({"results": results}))


if __name__ == "__main__":
    main()
