"""Run voxtream==0.2.5's own SpeechGenerator on a VoXtream2 checkpoint; write its frames.

Executed with .venv-ref-voxtream's python (never imported by the server):

    .venv-ref-voxtream/bin/python tools/ref/voxtream/run_reference.py CKPT JOB.json OUT

What this runner provides so the reference runs offline on a test checkpoint, each a
stand-in for a download or for something the checkpoint directory holds:

- ``hf_hub_download(repo, name)`` -> the checkpoint directory's file of that name
  (config.json, phoneme_to_token.json, model.safetensors, Kyutai's Mimi file);
- the transformer pool: importing ``voxtream.utils.model`` builds its three real-size
  transformers; here ``llama3_2`` builds 1-layer stand-ins during that import, and the
  names the checkpoint's config gives are then registered with the shapes its
  ``formers`` key gives (real-size names keep the reference's shapes);
- Mimi: ``get_mimi`` is given the job's ``mimi_config`` (the tiny codec's; None for
  the published one);
- the speaker encoder (a torch.hub download) is never used: the voice comes from the
  reference's own prompt cache (``cache_prompt``: ``<stem>.prompt.npy`` beside the
  prompt's path), so neither Mimi's encoder nor the speaker encoder runs;
- with ``key`` set, the two draws a frame takes (the pointer move's top-p and the first
  code's top-k) use the server's counter-based uniforms (``models.random_draws``) in
  the reference's own ``argmax(p / q)``, ``q = -log(u)``, so seeded runs compare
  exactly; without it the job's settings must be greedy (``top_p`` 0, ``topk`` 1).

matmul precision is set back to "highest" after import (voxtream sets "medium").

JOB.json: {"mimi_config": dict | null, "generator": {overrides of generator.json},
"speaking_rates": {rate: {duration_state, weight, cfg_gamma}} | null, "jobs": [{"id",
"text": str, "mode": "whole" | "words", "voice": path of a .prompt.npy, "sampling"?:
{"temperature", "topk", "top_p"}, "key"?: int, "speaking_rate"?: float, "decode": bool}]}
-> OUT/<id>.codes.npy int64 [F, 16] (each decoded frame's codes, as Mimi gets them),
OUT/<id>.moves.npy int64 [S] (every step's pointer move), OUT/<id>.audio.npy float32
(with ``decode``).
"""

from __future__ import annotations

import itertools
import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent / "stubs"))

import torchtune.models.llama3_2 as _llama  # noqa: E402

_real_llama = _llama.llama3_2


def _stand_in(**kwargs):
    kwargs.update(num_layers=1, embed_dim=64, num_heads=4, num_kv_heads=2, intermediate_dim=64)
    kwargs["vocab_size"] = 8
    return _real_llama(**kwargs)


_llama.llama3_2 = _stand_in
import voxtream.utils.model as vx_model  # noqa: E402

_llama.llama3_2 = _real_llama

import voxtream.generator as vx_generator  # noqa: E402
import voxtream.utils.generator.setup as vx_setup  # noqa: E402
from moshi.models import loaders  # noqa: E402
from voxtream.config import SpeechGeneratorConfig  # noqa: E402
from voxtream.utils.generator.helpers import text_generator  # noqa: E402

from models.random_draws import uniform, vocab_hash  # noqa: E402 (pure torch)

torch.set_float32_matmul_precision("highest")
CODE_KEY = 0x51ED270B  # the server's key_xor of the first code's sampler


def generator_config(overrides: dict) -> SpeechGeneratorConfig:
    path = Path(vx_generator.__file__).parent / "configs" / "generator.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(overrides)
    return SpeechGeneratorConfig(**data)


def register_formers(ckpt: Path) -> None:
    """The pool entries the checkpoint's config names: the shapes its ``formers`` key
    gives, else the reference's own (rebuilt here: the import built stand-ins)."""
    from models.voxtream.config import KNOWN_FORMERS  # the same shapes, as facts

    config = json.loads((ckpt / "config.json").read_text())
    shapes = config.get("formers", {})
    for key in ("phone_former", "temp_former", "dep_former"):
        name = config[key]
        if name in shapes:
            vx_model.MODEL_POOL[name] = vx_model.get_llama3_2(**shapes[name])
        else:
            layers, heads, kv, dim, mlp = KNOWN_FORMERS[name]
            vx_model.MODEL_POOL[name] = vx_model.get_llama3_2(
                num_layers=layers,
                num_heads=heads,
                num_kv_heads=kv,
                embed_dim=dim,
                intermediate_dim=mlp,
            )


class Draws:
    """The server's counter-based uniforms for one context: ``move`` and ``code``."""

    def __init__(self, key: int) -> None:
        self.key = key
        self.count = {"move": 0, "code": 0}

    def noise(self, which: str, vocab: int) -> torch.Tensor:
        key = self.key ^ (CODE_KEY if which == "code" else 0)
        draw = self.count[which]
        self.count[which] += 1
        u = uniform(torch.tensor([key]), torch.tensor([draw]), vocab_hash(vocab, "cpu"), 1)
        return u[0, 0]


def patch_draws(draws: Draws | None, states: int, vocab: int) -> None:
    def top_k(probs: torch.Tensor, k: int) -> torch.Tensor:
        values, ids = torch.topk(probs, k, dim=-1)
        if draws is None:
            return ids[..., :1]
        u = draws.noise("code", vocab)[ids]
        return ids.gather(-1, (values / -torch.log(u)).argmax(-1, keepdim=True))

    def top_p(probs: torch.Tensor, p: float) -> torch.Tensor:
        ordered, order = torch.sort(probs, dim=-1, descending=True)
        cut = torch.cumsum(ordered, dim=-1) - ordered > p
        ordered = ordered * (~cut).float()
        ordered = ordered / ordered.sum(dim=-1, keepdim=True)
        if draws is None:
            return order[..., :1]
        u = draws.noise("move", states)[order]
        return order.gather(-1, (ordered / -torch.log(u)).argmax(-1, keepdim=True))

    vx_model.sample_top_k = top_k
    vx_model.sample_top_p = top_p


def make_generator(ckpt: Path, job: dict) -> vx_generator.SpeechGenerator:
    """The reference's SpeechGenerator on ``ckpt`` with the job's generator settings,
    Mimi config and speaking rates (on CUDA when there is one, as the reference picks)."""
    files = {p.name: str(p) for p in ckpt.iterdir() if p.is_file()}
    vx_setup.hf_hub_download = lambda repo, name, token=None: files[name]
    mimi_config = job.get("mimi_config")
    real_get_mimi = loaders.get_mimi

    def get_mimi(filename, device="cpu", num_codebooks=8, mimi_config_=None, **kw):
        return real_get_mimi(
            filename, device=device, num_codebooks=num_codebooks, mimi_config=mimi_config
        )

    vx_setup.loaders.get_mimi = get_mimi
    vx_setup.load_speaker_encoder = lambda **kw: torch.nn.Identity()
    vx_generator.load_speaker_encoder = vx_setup.load_speaker_encoder
    register_formers(ckpt)
    overrides = {
        "model_weight_path": None,
        "normalize_prompt_loudness": False,
        "prompt_loudness_lufs": -23.0,
        **job.get("generator", {}),
        "cache_prompt": True,
        "apply_vad": False,
        "enhance_prompt": False,
    }
    generator = vx_generator.SpeechGenerator(generator_config(overrides), job.get("speaking_rates"))
    torch.set_float32_matmul_precision("highest")
    return generator


def prompt_path(voice: str | Path, out: Path, name: str) -> Path:
    """A prompt path whose cache (``<stem>.prompt.npy``) is the voice file."""
    shutil.copy(voice, out / f"{name}.prompt.npy")
    path = out / f"{name}.wav"
    path.write_bytes(b"")  # never read: the prompt cache stands in
    return path


def main() -> None:
    ckpt, job_path, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    torch.set_num_threads(2)
    job = json.loads(job_path.read_text())
    generator = make_generator(ckpt, job)
    config = generator.config
    model_cfg = generator.model.config
    results = []
    for item in job["jobs"]:
        prompt = prompt_path(item["voice"], out, item["id"])
        sampling = {"temperature": config.temperature, "topk": config.topk, "top_p": config.top_p}
        sampling.update(item.get("sampling", {}))
        generator.config = generator.ctx.config = replace(config, **sampling)
        key = item.get("key")
        patch_draws(
            Draws(key) if key is not None else None,
            model_cfg.num_phone_states,
            model_cfg.audio_vocab_size,
        )
        moves, codes = [], []
        frame_fn = generator.model.generate_frame

        def record_frame(*args, _frame=frame_fn, moves=moves, **kwargs):
            frame, shift, counts = _frame(*args, **kwargs)
            moves.append(int(shift.reshape(-1)[0]))
            return frame, shift, counts

        generator.model.generate_frame = record_frame
        decode = vx_generator.decode_audio_frame

        def record_decode(mimi, frame, sem_code, mimi_vocab_size, _decode=decode, codes=codes):
            joined = torch.cat([sem_code, frame[:, 1:]], dim=1).clamp(0, mimi_vocab_size - 1)
            codes.append(joined[0].cpu().numpy().astype(np.int64))
            return _decode(mimi, frame, sem_code, mimi_vocab_size)

        vx_generator.decode_audio_frame = record_decode
        text = item["text"] if item["mode"] == "whole" else text_generator(item["text"])
        rate = item.get("speaking_rate")
        rate_iter = itertools.repeat(float(rate)) if rate is not None else None
        audio = [a for a, _ in generator.generate_stream(prompt, text, speaking_rate=rate_iter)]
        vx_generator.decode_audio_frame = decode
        generator.model.generate_frame = frame_fn
        result = {"id": item["id"], "frames": len(codes)}
        np.save(out / f"{item['id']}.codes.npy", np.stack(codes) if codes else np.zeros((0, 16)))
        result["codes"] = f"{item['id']}.codes.npy"
        np.save(out / f"{item['id']}.moves.npy", np.asarray(moves, np.int64))
        result["moves"] = f"{item['id']}.moves.npy"
        if item.get("decode", True):
            wave = np.concatenate(audio).astype(np.float32) if audio else np.zeros(0, np.float32)
            np.save(out / f"{item['id']}.audio.npy", wave)
            result["audio"] = f"{item['id']}.audio.npy"
        results.append(result)
    (out / "result.json").write_text(json.dumps({"results": results}))


if __name__ == "__main__":
    main()
