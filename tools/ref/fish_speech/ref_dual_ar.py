"""Run fish-speech==0.1.0's DualARTransformer on an S2 Pro checkpoint; write the frames.

Executed with .venv-ref-fish's python (never imported by the server):

    .venv-ref-fish/bin/python tools/ref/fish_speech/ref_dual_ar.py CKPT JOB.json OUT

The PyPI release predates S2 Pro; what this runner maps so its classes read an S2
Pro directory (each as fish-speech's GitHub sources that read S2 Pro do it):

- config: ``text_config``/``audio_decoder_config`` flattened into ``DualARModelArgs``
  (``codebook_size`` = the fast vocabulary, ``scale_codebook_embeddings`` on, the fast
  transformer with the slow one's rotary base and norm epsilon); ``max_seq_len``
  lowered to 2,048 (only the size of the reference's causal mask and caches);
- weights: ``text_model.model.X`` -> ``X``; ``audio_decoder.codebook_embeddings`` ->
  ``codebook_embeddings``; ``audio_decoder.Y`` -> ``fast_Y``; loaded strictly;
- the tokenizer object the classes ask for: only its semantic ids (config.json's);
- ``norm_fastlayer_input``: S2 Pro feeds the fast transformer the slow one's
  final-norm hidden state (0.1.0 fed the state before the norm); ``forward_generate``
  is wrapped to apply the model's own ``norm``;
- the decoding loop is S2 Pro's (``decode_one_token_ar`` on GitHub), written here
  over the release's ``forward_generate`` / ``forward_generate_fast``: logits masked
  to the semantic tokens and ``<|im_end|>``, repetition-aware sampling (a window of
  the turn's last 10 decoded tokens), residual codes from the fast head's first
  ``residual`` scores; probabilities from the release's ``logits_to_probs`` (its
  top-p keeps the ids within top-p, as S2 Pro's does; no top-k: jobs use top_k 0),
  drawn as ``argmax(p / q)`` with ``q = -log(u)`` and ``u`` the server's own
  counter-based uniforms (``models.random_draws``), so seeded runs compare exactly;
- each text turn re-encodes the whole conversation and prefills it from scratch, as
  S2 Pro's ``generate_long`` does (the server continues its cache instead).

JOB.json: {"residual": int, "ras_xor": int, "fast_xor": int, "jobs": [JOB, ...]};
JOB: {"id", "texts": [str, ...], "ref_text"?: str, "ref_codes"?: path of int64 .npy
[T, N], "greedy": bool, "temperature", "top_p", "key": int, "max_frames": int}
-> OUT/<id>.frames.npy int64 [F, 1 + N] (the token's index among the allowed ids -
semantic code, or the semantic count for <|im_end|> - then the codes; every frame
sampled, turn after turn) and OUT/<id>.turns.npy (frames per turn).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
from fish_speech.models.text2semantic import inference as release  # noqa: E402
from fish_speech.models.text2semantic.llama import (  # noqa: E402
    BaseTransformer,
    DualARModelArgs,
    DualARTransformer,
)

from models.random_draws import uniform, vocab_hash  # noqa: E402 (pure torch)


class SemanticIds:
    """What the release's classes read of a tokenizer."""

    def __init__(self, begin: int, end: int) -> None:
        self.semantic_begin_id, self.semantic_end_id = begin, end
        self.semantic_id_to_token_id = {i: begin + i for i in range(end - begin + 1)}


def build(
    ckpt: Path, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> tuple[DualARTransformer, dict]:
    data = json.loads((ckpt / "config.json").read_text())
    tc, adc = data["text_config"], data["audio_decoder_config"]
    args = DualARModelArgs(
        model_type="dual_ar",
        vocab_size=tc["vocab_size"],
        n_layer=tc["n_layer"],
        n_head=tc["n_head"],
        n_local_heads=tc.get("n_local_heads", -1),
        head_dim=tc.get("head_dim"),
        dim=tc["dim"],
        intermediate_size=tc.get("intermediate_size"),
        rope_base=tc.get("rope_base", 10000),
        norm_eps=tc.get("norm_eps", 1e-5),
        max_seq_len=2048,
        tie_word_embeddings=tc.get("tie_word_embeddings", True),
        attention_qk_norm=tc.get("attention_qk_norm", False),
        scale_codebook_embeddings=True,
        codebook_size=adc["vocab_size"],
        num_codebooks=adc["num_codebooks"],
        n_fast_layer=adc["n_layer"],
        fast_dim=adc.get("dim"),
        fast_n_head=adc.get("n_head"),
        fast_n_local_heads=adc.get("n_local_heads"),
        fast_head_dim=adc.get("head_dim"),
        fast_intermediate_size=adc.get("intermediate_size"),
        fast_attention_qk_norm=adc.get("attention_qk_norm", False),
    )
    ids = SemanticIds(data["semantic_start_token_id"], data["semantic_end_token_id"])
    model = DualARTransformer(args, tokenizer=ids)
    state = {}
    for key, value in load_file(str(ckpt / "model.safetensors")).items():
        if key.startswith("text_model.model."):
            key = key[len("text_model.model.") :]
        elif key.startswith("audio_decoder."):
            rest = key[len("audio_decoder.") :]
            key = rest if rest.startswith("codebook_embeddings.") else "fast_" + rest
        state[key] = value.float()
    model.load_state_dict(state, strict=True)
    model = model.to(device=device, dtype=dtype).eval()

    def forward_generate(x, input_pos=None, audio_masks=None, audio_parts=None):  # noqa: ANN001, ANN202
        out = BaseTransformer.forward_generate(model, x, input_pos, audio_masks, audio_parts)
        out.hidden_states = model.fast_project_in(model.norm(out.hidden_states))
        return out

    model.forward_generate = forward_generate
    with torch.device(device):
        model.setup_caches(max_batch_size=1, max_seq_len=2048, dtype=dtype)
    return model, data


class Draws:
    """The server's counter-based uniforms of one context (its three samplers)."""

    def __init__(self, key: int, ras_xor: int, fast_xor: int) -> None:
        self.keys = {"slow": key, "ras": key ^ ras_xor, "fast": key ^ fast_xor}
        self.count = {"slow": 0, "ras": 0, "fast": 0}

    def take(self, name: str, vocab: int, count: int = 1) -> torch.Tensor:
        keys = torch.tensor([self.keys[name]])
        draws = torch.tensor([self.count[name]])
        self.count[name] += count
        return uniform(keys, draws, vocab_hash(vocab, torch.device("cpu")), count)[0]


def choose(
    logits: torch.Tensor, job: dict, u: torch.Tensor | None, temp: float, top_p: float
) -> int:
    """An id from 1-D ``logits`` (masked ids at -inf): greedy, or the release's
    probabilities drawn with the uniforms ``u`` (one per id)."""
    if job["greedy"]:
        return int(logits.argmax())
    probs = release.logits_to_probs(
        logits.clone(), torch.tensor(temp), torch.tensor(top_p), torch.tensor(1.0)
    )
    return int((probs / -torch.log(u)).argmax())


def turn(
    model: DualARTransformer, prompt: torch.Tensor, job: dict, spec: dict, draws: Draws
) -> list[list[int]]:
    """One turn from its whole prompt [1 + N, T]: every frame it samples."""
    cfg = model.config
    n, residual = cfg.num_codebooks, spec["residual"]
    begin, end = model.tokenizer.semantic_begin_id, model.tokenizer.semantic_end_id
    allowed = list(range(begin, end + 1)) + [spec["im_end"]]
    mask = torch.full((cfg.vocab_size,), float("-inf"))
    mask[allowed] = 0
    model.setup_caches(max_batch_size=1, max_seq_len=2048, dtype=torch.float32)
    for layer in model.layers:
        layer.attention.kv_cache.k_cache.zero_()
        layer.attention.kv_cache.v_cache.zero_()
    x, pos = prompt[None], torch.arange(prompt.shape[1])
    window: list[int] = []
    frames: list[list[int]] = []
    temp, top_p = job["temperature"], job["top_p"]
    for step in range(job["max_frames"]):
        out = model.forward_generate(x, pos)
        logits = (out.logits[0, -1] + mask)[allowed]
        u = draws.take("slow", len(allowed))[0] if not job["greedy"] else None
        token = choose(logits, job, u, temp, top_p)
        if step > 0:
            uf = draws.take("ras", len(allowed))[0] if not job["greedy"] else None
            fallback = choose(logits, job, uf, 1.0, 0.9)
            if token < len(allowed) - 1 and token in window:
                token = fallback
            window = (window + [token])[-10:]
        code0 = token if token < len(allowed) - 1 else 0
        for layer in model.fast_layers:
            layer.attention.kv_cache.k_cache.zero_()
            layer.attention.kv_cache.v_cache.zero_()
        model.forward_generate_fast(out.hidden_states[:, -1:], torch.tensor([0]))
        h = model.fast_embeddings(torch.tensor([code0]))
        codes = [code0]
        uc = draws.take("fast", residual, n - 1) if not job["greedy"] else None
        for k in range(1, n):
            scores = model.forward_generate_fast(h, torch.tensor([k]))[0, -1, :residual]
            code = choose(scores, job, uc[k - 1] if uc is not None else None, temp, top_p)
            codes.append(code)
            h = model.fast_embeddings(torch.tensor([code]))
        frames.append([token, *codes])
        if token == len(allowed) - 1:
            break
        token_id = begin + token
        x = torch.tensor([token_id, *codes])[None, :, None]
        pos = pos[-1:] + 1
    return frames


def main() -> None:
    ckpt, job_path, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    torch.set_num_threads(2)
    spec = json.loads(job_path.read_text())
    model, data = build(ckpt)
    tok = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
    spec["im_end"] = tok.token_to_id("<|im_end|>")
    n, begin = model.config.num_codebooks, data["semantic_start_token_id"]

    def text(s: str) -> list[tuple[int, list[int]]]:
        return [(i, [0] * n) for i in tok.encode(s, add_special_tokens=False).ids]

    def vq(frames: np.ndarray) -> list[tuple[int, list[int]]]:
        return [(begin + int(f[0]), [int(c) for c in f]) for f in frames]

    results = []
    with torch.no_grad():
        for job in spec["jobs"]:
            if job.get("ref_codes"):
                ref = np.load(job["ref_codes"])
                tagged = job["ref_text"]
                if "<|speaker:" not in tagged:
                    tagged = "<|speaker:0|>" + tagged
                system = (
                    text("<|im_start|>system\n")
                    + text(
                        "convert the provided text to speech reference to the following:\n\nText:\n"
                    )
                    + text(tagged)
                    + text("\n\nSpeech:\n")
                    + vq(ref)
                    + text("<|im_end|>\n")
                )
            else:
                system = (
                    text("<|im_start|>system\n")
                    + text("convert the provided text to speech")
                    + text("<|im_end|>\n")
                )
            conversation = system
            draws = Draws(job["key"], spec["ras_xor"], spec["fast_xor"])
            frames, turns = [], []
            for t in job["texts"]:
                conversation = (
                    conversation + text("<|im_start|>user\n") + text(t) + text("<|im_end|>\n")
                )
                prompt = conversation + text("<|im_start|>assistant\n<|voice|>")
                values = torch.tensor([[tid, *codes] for tid, codes in prompt]).T
                made = turn(model, values, job, spec, draws)
                frames += made
                turns.append(len(made))
                kept = [f[1:] for f in made[:-1]]  # generate_long drops the last frame
                conversation = (
                    conversation
                    + text("<|im_start|>assistant\n<|voice|>")
                    + vq(np.asarray(kept).reshape(-1, n))
                    + text("<|im_end|>\n")
                )
            np.save(out / f"{job['id']}.frames.npy", np.asarray(frames, np.int64))
            np.save(out / f"{job['id']}.turns.npy", np.asarray(turns, np.int64))
            results.append(
                {
                    "id": job["id"],
                    "frames": f"{job['id']}.frames.npy",
                    "turns": f"{job['id']}.turns.npy",
                }
            )
    (out / "result.json").write_text(json.dumps({"results": results}))


if __name__ == "__main__":
    main()
