"""Run voxcpm==2.0.3's own VoxCPM pipeline on a VoxCPM2 checkpoint; write what it made.

Executed with .venv-ref-voxcpm's python (never imported by the server):

    .venv-ref-voxcpm/bin/python tools/ref/voxcpm/run_reference.py CKPT JOB.json OUT

The model is the reference's ``VoxCPM(CKPT, enable_denoiser=False, optimize=False)``:
offline (a local directory: no hub call, no denoiser download, no warm-up generation,
no torch.compile), on the job's device (CPU unless told). Each job runs through its
``generate`` / ``generate_streaming`` as a user calls them (text whitespace folding, the
prompt cache built from the wav files, the effective ``max_len``), with
``normalize=False``, ``denoise=False`` and ``retry_badcase=False`` (a retry would rerun
with fresh noise; a streaming server never retries). What the runner adds, without
changing a number the reference computes, is recording: the DiT's condition and output
per step, the stop head's logits, the prefill sequence, the prompt's latents, and the
initial noise of each patch's flow-matching solve.

Noise: the reference draws exactly one ``torch.randn((1, feat_dim, patch_size))`` (global
RNG, the model's dtype) per patch, at the start of that patch's Euler solve. A job gives
either ``seed`` (``torch.manual_seed(seed)`` before the call; the draws are recorded) or
``noise`` (a ``.npy`` float32 ``[N, feat_dim, patch_size]``, channel-major as drawn, read
a row per patch in order: ``torch.randn`` is replaced for the call, and any other draw,
or running out of rows, is an error).

JOB.json: {"device"?: "cpu" | "cuda", "tokenize"?: [str, ...], "jobs": [{
    "id": str, "text": str,
    "reference_wav"?: path (voice cloning from audio alone: the "reference" prompt),
    "prompt_wav"?: path, "prompt_text"?: str (continuation: both or neither; with
        "reference_wav" too, the "ref_continuation" prompt),
    "streaming"?: bool (default false), "seed"?: int | "noise"?: path.npy (one of),
    "max_len"?: int (default 8; the reference further caps it at
        int(len(target ids) * 6 + 10)), "min_len"?: int (2), "cfg_value"?: float (2.0),
    "inference_timesteps"?: int (10), "decode"?: ["stream", "whole"] (default both)}]}

-> OUT/result.json: {"sample_rate": 48000, "encode_sample_rate": 16000, "patch_size",
"feat_dim", "samples_per_patch", "versions": {...}, "tokens"?: [[id, ...], ...] (the
reference's wrapped tokenizer on each "tokenize" string: no BOS, Chinese pieces split),
"results": [{"id", "mode": "zero_shot" | "reference" | "continuation" |
"ref_continuation", "target_ids": [...], "max_len": the effective cap, "steps": T,
"stop_step": the step whose stop flag ended the run, or null (the cap ended it),
"context_len": prompt patches the whole decode prepends (continuation modes), and the
file names below}]}, and per job, float32 unless said:

- <id>.patches.npy [T, patch_size, feat_dim]: each generated patch, patch-major (as the
  model feeds it to LocEnc and stacks it for the VAE);
- <id>.noise.npy [T, feat_dim, patch_size]: each patch's initial noise, channel-major;
- <id>.mu.npy [T, 2 * dit hidden]: the DiT's condition per step (lm_to_dit | res_to_dit);
- <id>.cond.npy [T, feat_dim, patch_size]: the DiT's prefix patch per step, channel-major;
- <id>.stop_logits.npy [T, 2]: the stop head's logits at each step (argmax 1 = stop,
  honoured only for steps > min_len);
- <id>.tokens.npy int64 [S], <id>.text_mask.npy / <id>.audio_mask.npy int64 [S],
  <id>.feats.npy [S, patch_size, feat_dim]: the prefill sequence as the model gets it;
- <id>.ref_latents.npy [R, patch_size, feat_dim], <id>.ref_wav16k.npy [n] (with a
  reference clip), <id>.prompt_latents.npy [A, ...], <id>.prompt_wav16k.npy (with a
  continuation prompt): the encoded prompt and the 16 kHz mono signal the reference read
  (librosa) before padding it to whole patches;
- <id>.audio_stream.npy: the stateful streaming decode, one patch at a time, started from
  zero state (what ``generate_streaming`` yields, concatenated);
- <id>.audio_whole.npy: the one-shot decode of [context patches | generated patches]
  with the context's samples cut (what ``generate`` returns).
The job's own mode gives one of the two straight from the reference's API; the other is
made with the reference's own VAE calls the way its other mode makes it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent / "stubs"))

import librosa  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from voxcpm import VoxCPM  # noqa: E402

DEFAULTS = {"max_len": 8, "min_len": 2, "cfg_value": 2.0, "inference_timesteps": 10}


class Noise:
    """Stands in for ``torch.randn`` during a job: rows of a file, or the real draws
    (seeded), recorded either way."""

    def __init__(self, shape: tuple[int, ...], rows: np.ndarray | None) -> None:
        self.shape = shape
        self.rows = rows
        self.drawn: list[np.ndarray] = []
        self.real = torch.randn

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        size = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
        size = tuple(kwargs.get("size", size))
        if size != self.shape:
            raise RuntimeError(f"unexpected torch.randn{size}: only {self.shape} per patch")
        if self.rows is None:
            draw = self.real(*args, **kwargs)
        else:
            if len(self.drawn) >= len(self.rows):
                raise RuntimeError(f"noise file has {len(self.rows)} rows; patch {len(self.drawn)}")
            row = torch.from_numpy(np.ascontiguousarray(self.rows[len(self.drawn)]))
            draw = row.unsqueeze(0).to(kwargs.get("dtype") or torch.float32)
            draw = draw.to(kwargs.get("device") or "cpu")
        self.drawn.append(draw[0].float().cpu().numpy())
        return draw


class Recorder:
    """Wraps the reference model's own methods (instance attributes) to see their
    inputs and outputs; ``clear`` between jobs."""

    def __init__(self, tts: VoxCPM) -> None:
        self.model = tts.tts_model
        self.clear()
        m = self.model
        self._wrap(m.feat_decoder, "forward", self._on_cfm)
        self._wrap(m.stop_head, "forward", self._on_stop)
        self._wrap(m, "_inference", self._on_inference)
        self._wrap(m, "_encode_wav", self._on_encode)
        real_load = librosa.load

        def load(*args: Any, **kwargs: Any) -> Any:
            wav, sr = real_load(*args, **kwargs)
            self.loaded.append(np.asarray(wav, np.float32).copy())
            return wav, sr

        librosa.load = load

    def clear(self) -> None:
        self.mu: list[np.ndarray] = []
        self.cond: list[np.ndarray] = []
        self.patches: list[np.ndarray] = []
        self.stop: list[np.ndarray] = []
        self.prefill: dict[str, Any] = {}
        self.encoded: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.loaded: list[np.ndarray] = []

    @staticmethod
    def _wrap(owner: Any, name: str, hook: Any) -> None:
        real = getattr(owner, name)
        setattr(owner, name, lambda *a, **k: hook(real, *a, **k))

    def _on_cfm(self, real: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        out = real(*args, **kwargs)
        self.mu.append(kwargs["mu"][0].float().cpu().numpy())
        self.cond.append(kwargs["cond"][0].float().cpu().numpy())
        self.patches.append(out[0].transpose(0, 1).float().cpu().numpy())
        return out

    def _on_stop(self, real: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        out = real(*args, **kwargs)
        self.stop.append(out[0].float().cpu().numpy())
        return out

    def _on_inference(self, real: Any, text, text_mask, feat, feat_mask, **kwargs: Any) -> Any:
        self.prefill = {
            "tokens": text[0].long().cpu().numpy(),
            "text_mask": text_mask[0].long().cpu().numpy(),
            "audio_mask": feat_mask[0].long().cpu().numpy(),
            "feats": feat[0].float().cpu().numpy(),
            "max_len": kwargs["max_len"],
            "min_len": kwargs["min_len"],
        }
        return real(text, text_mask, feat, feat_mask, **kwargs)

    def _on_encode(self, real: Any, wav_path: str, padding_mode: str = "right", **kw: Any):
        before = len(self.loaded)
        out = real(wav_path, padding_mode=padding_mode, **kw)
        kind = "ref" if padding_mode == "right" else "prompt"
        self.encoded[kind] = (out.float().numpy(), self.loaded[before])
        return out


def whole_decode(model: Any, patches: np.ndarray, context: np.ndarray) -> np.ndarray:
    """The non-streaming path's decode: [context | patches] at once, context cut."""
    seq = torch.from_numpy(np.concatenate([context, patches]))  # [T, P, D]
    z = seq.permute(2, 0, 1).reshape(1, seq.shape[2], -1).to(model.device, torch.float32)
    with torch.inference_mode():
        audio = model.audio_vae.decode(z)[0, 0]
    cut = len(context) * model.patch_size * model._decode_chunk_size
    return audio[cut:].cpu().numpy()


def stream_decode(model: Any, patches: np.ndarray) -> np.ndarray:
    """The streaming path's decode: one patch a call, state from zero."""
    chunks = []
    with torch.inference_mode(), model.audio_vae.streaming_decode() as dec:
        for patch in patches:
            z = torch.from_numpy(patch).T.unsqueeze(0).to(model.device, torch.float32)
            chunks.append(dec.decode_chunk(z).squeeze(1)[0].cpu().numpy())
    return np.concatenate(chunks) if chunks else np.zeros(0, np.float32)


def run_job(tts: VoxCPM, rec: Recorder, item: dict[str, Any], out: Path) -> dict[str, Any]:
    model = tts.tts_model
    name = item["id"]
    settings = {k: item.get(k, v) for k, v in DEFAULTS.items()}
    if ("seed" in item) == ("noise" in item):
        raise ValueError(f"job {name}: give exactly one of 'seed' and 'noise'")
    rows = np.load(item["noise"]).astype(np.float32) if "noise" in item else None
    shape = (1, model.feat_dim, model.patch_size)
    if rows is not None and (rows.ndim != 3 or rows.shape[1:] != shape[1:]):
        raise ValueError(f"job {name}: noise rows are {rows.shape[1:]}, not {shape[1:]}")
    noise = Noise(shape, rows)
    rec.clear()
    kwargs = dict(
        text=item["text"],
        prompt_wav_path=item.get("prompt_wav"),
        prompt_text=item.get("prompt_text"),
        reference_wav_path=item.get("reference_wav"),
        normalize=False,
        denoise=False,
        retry_badcase=False,
        **settings,
    )
    streaming = bool(item.get("streaming", False))
    if "seed" in item:
        torch.manual_seed(int(item["seed"]))
    torch.randn = noise
    try:
        if streaming:
            audio = np.concatenate(list(tts.generate_streaming(**kwargs)))
        else:
            audio = tts.generate(**kwargs)
    finally:
        torch.randn = noise.real
    audio = np.asarray(audio, np.float32)
    patches = np.stack(rec.patches).astype(np.float32)
    pre = rec.prefill
    audio_mask = pre["audio_mask"]
    has_ref = "ref" in rec.encoded
    has_prompt = "prompt" in rec.encoded
    mode = {
        (False, False): "zero_shot",
        (True, False): "reference",
        (False, True): "continuation",
        (True, True): "ref_continuation",
    }[(has_ref, has_prompt)]
    # The whole decode's context: the last (streaming_prefix_len - 1 = 3) audio positions
    # when the prompt ends in audio (continuation modes), as the reference takes them.
    context = np.zeros((0, *patches.shape[1:]), np.float32)
    if audio_mask[-1] == 1:
        where = np.nonzero(audio_mask)[0]
        context = pre["feats"][where[-min(3, len(where)) :]]
    stop_step = None
    for i, logits in enumerate(rec.stop):
        if i > pre["min_len"] and int(np.argmax(logits)) == 1:
            stop_step = i
            break
    files: dict[str, np.ndarray] = {
        "patches": patches,
        "noise": np.stack(noise.drawn).astype(np.float32),
        "mu": np.stack(rec.mu).astype(np.float32),
        "cond": np.stack(rec.cond).astype(np.float32),
        "stop_logits": np.stack(rec.stop).astype(np.float32),
        "tokens": pre["tokens"],
        "text_mask": pre["text_mask"],
        "audio_mask": audio_mask,
        "feats": pre["feats"],
    }
    for kind, (latents, wav) in rec.encoded.items():
        files[f"{kind}_latents"] = latents
        files[f"{kind}_wav16k"] = wav
    decodes = item.get("decode", ["stream", "whole"])
    if "stream" in decodes:
        files["audio_stream"] = audio if streaming else stream_decode(model, patches)
    if "whole" in decodes:
        files["audio_whole"] = whole_decode(model, patches, context) if streaming else audio
    result: dict[str, Any] = {
        "id": name,
        "mode": mode,
        "target_ids": [int(t) for t in model.text_tokenizer(tidy(item["text"]))],
        "max_len": pre["max_len"],
        "steps": len(patches),
        "stop_step": stop_step,
        "context_len": len(context),
    }
    for key, array in files.items():
        np.save(out / f"{name}.{key}.npy", array)
        result[key] = f"{name}.{key}.npy"
    return result


def tidy(text: str) -> str:
    """The reference pipeline's only text preprocessing (``normalize=False``)."""
    return re.sub(r"\s+", " ", text.replace("\n", " "))


def main() -> None:
    ckpt, job_path, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    torch.set_num_threads(int(os.environ.get("REF_THREADS", "2")))
    job = json.loads(job_path.read_text())
    tts = VoxCPM(
        voxcpm_model_path=str(ckpt),
        enable_denoiser=False,
        optimize=False,
        device=job.get("device", "cpu"),
    )
    rec = Recorder(tts)
    model = tts.tts_model
    report: dict[str, Any] = {
        "sample_rate": model.sample_rate,
        "encode_sample_rate": model._encode_sample_rate,
        "patch_size": model.patch_size,
        "feat_dim": model.feat_dim,
        "samples_per_patch": model.patch_size * model._decode_chunk_size,
        "versions": {p: version(p) for p in ("voxcpm", "torch", "transformers", "tokenizers")},
    }
    if "tokenize" in job:
        report["tokens"] = [[int(t) for t in model.text_tokenizer(s)] for s in job["tokenize"]]
    report["results"] = [run_job(tts, rec, item, out) for item in job.get("jobs", [])]
    (out / "result.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
