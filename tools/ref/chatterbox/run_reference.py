"""Run the reference package chatterbox-tts==0.1.7 on a checkpoint; write what it makes.

Executed with .venv-ref-chatterbox's python (never imported by the server):

    .venv-ref-chatterbox/bin/python tools/ref/chatterbox/run_reference.py CKPT JOB.json OUT

The reference's ``from_local`` builds T3 with GPT-2 medium's sizes written in its
code; a checkpoint of other sizes (the tests' tiny ones) names them in JOB.json's
"t3_sizes" ({"hidden", "layers", "heads", "positions"}), which this runner
registers as a backbone config before building T3 exactly as ``from_local`` does
(the same T3Config fields, ``load_state_dict`` strict over the same file).

JOB.json: {"t3_sizes"?: {...}, "tasks": [TASK, ...]}; each TASK has "kind" and "id":
- {"kind": "t3", "id", "speaker" (256 floats), "prompt" (speech token ids),
   "text" (text token ids), "temperature", "top_k", "top_p", "repetition_penalty",
   "max_gen_len", "seed"} -> OUT/<id>.tokens.npy int64: ``inference_turbo``'s tokens
- {"kind": "text", "id", "text"} -> OUT/<id>.ids.npy int64: the ids ``generate`` gives T3
   (``punc_norm``, then the checkpoint's tokenizer as ``from_local`` loads it), and the
   normalised text in result.json
- {"kind": "hift", "id", "mel" (path of a float32 .npy [1, 80, F]), "seed"}
   -> OUT/<id>.wav.npy float32 [F * 480]: ``mel2wav.inference`` right after
   ``torch.manual_seed(seed)`` (its sine source and noise come from that generator)
- {"kind": "s3gen", "id", "tokens" (ids), "prompt_token" (ids), "prompt_feat" (path of a
   float32 .npy [1, 2P, 80]), "embedding" (path of a float32 .npy [1, 192]), "seed"}
   -> OUT/<id>.wav.npy: ``S3Gen.inference`` (flow, two mean-flow steps, HiFT, the fade-in)
   right after ``torch.manual_seed(seed)``; and OUT/<id>.mel.npy: ``flow_inference``
   under the same seed
- {"kind": "s3gen_stream", "id", the "s3gen" fields, "chunks" ([end, view] pairs)}
   -> OUT/<id>.c<k>.npy: a unit streamed as ``finalize=False`` decodes it (``run_s3gen_stream``)
- {"kind": "conds", "id"} -> OUT/<id>.<field>.npy for each tensor of CKPT/conds.pt as
   ``Conditionals.load`` reads it (the built-in voice): t3_speaker_emb,
   t3_cond_prompt_speech_tokens, gen_prompt_token, gen_prompt_feat, gen_embedding
- {"kind": "clone", "id", "wav" (an audio file)} -> the same fields as "conds", of the
   voice ``ChatterboxTurboTTS.prepare_conditionals(wav)`` computes (librosa load at
   24 kHz, loudness, voice encoder, S3 tokenizer, CAM++, prompt mel), with T3, S3Gen
   (all four parts) and the voice encoder (CKPT/ve.safetensors) built as ``from_local``
   builds them
S3Gen is built as ``from_local`` builds it (``S3Gen(meanflow=True)``); each of its parts
that a checkpoint holds (``flow.``, ``mel2wav.``, ``speaker_encoder.``, ``tokenizer.``
prefixes of ``s3gen_meanflow.safetensors``) is loaded strictly, so the tests can check
the parts ported so far against the reference's own modules.
OUT/result.json lists what was written.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import jobs  # first: the reference's environment
import numpy as np
import torch
from safetensors.torch import load_file


def build_t3(ckpt: Path, sizes: dict | None):  # noqa: ANN201 (a reference object)
    from chatterbox.models.t3 import T3
    from chatterbox.models.t3.llama_configs import GPT2_MEDIUM_CONFIG, LLAMA_CONFIGS
    from chatterbox.models.t3.modules.t3_config import T3Config

    state = load_file(str(ckpt / "t3_turbo_v1.safetensors"))
    name = "GPT2_medium"
    if sizes:
        name = "voiceserver_test_gpt2"
        LLAMA_CONFIGS[name] = dict(
            GPT2_MEDIUM_CONFIG,
            n_embd=sizes["hidden"],
            hidden_size=sizes["hidden"],
            n_head=sizes["heads"],
            n_layer=sizes["layers"],
            n_positions=sizes["positions"],
            n_ctx=sizes["positions"],
            vocab_size=state["tfmr.wte.weight"].shape[0],
        )
    # As ChatterboxTurboTTS.from_local sets them.
    hp = T3Config(text_tokens_dict_size=state["text_emb.weight"].shape[0])
    hp.llama_config_name = name
    hp.speech_tokens_dict_size = 6563
    hp.input_pos_emb = None
    hp.speech_cond_prompt_len = 375
    hp.use_perceiver_resampler = False
    hp.emotion_adv = False
    t3 = T3(hp)
    t3.load_state_dict(state)
    del t3.tfmr.wte
    return t3.eval()


def run_t3(t3, task: dict, out: Path) -> dict:  # noqa: ANN001
    from chatterbox.models.t3.modules.cond_enc import T3Cond

    cond = T3Cond(
        speaker_emb=torch.tensor(task["speaker"], dtype=torch.float32).view(1, -1),
        cond_prompt_speech_tokens=torch.tensor(task["prompt"], dtype=torch.long).view(1, -1),
        emotion_adv=0.0 * torch.ones(1, 1, 1),
    )
    torch.manual_seed(task.get("seed", 0))
    with torch.inference_mode():
        tokens = t3.inference_turbo(
            t3_cond=cond,
            text_tokens=torch.tensor(task["text"], dtype=torch.long).view(1, -1),
            temperature=task["temperature"],
            top_k=task["top_k"],
            top_p=task["top_p"],
            repetition_penalty=task["repetition_penalty"],
            max_gen_len=task["max_gen_len"],
        )
    path = out / f"{task['id']}.tokens.npy"
    np.save(path, tokens.reshape(-1).numpy().astype(np.int64))
    return {"id": task["id"], "tokens": path.name}


@cache
def build_s3gen(ckpt: Path):  # noqa: ANN201 (a reference object)
    from chatterbox.models.s3gen import S3Gen

    state = load_file(str(ckpt / "s3gen_meanflow.safetensors"))
    s3gen = S3Gen(meanflow=True)
    for part in ("flow", "mel2wav", "speaker_encoder", "tokenizer"):
        prefix = part + "."
        sub = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
        if sub:
            getattr(s3gen, part).load_state_dict(sub, strict=True)
    return s3gen.eval()


def run_hift(s3gen, task: dict, out: Path) -> dict:  # noqa: ANN001
    mel = torch.from_numpy(np.load(task["mel"]))
    torch.manual_seed(task["seed"])
    with torch.inference_mode():
        wav, _ = s3gen.mel2wav.inference(speech_feat=mel, cache_source=torch.zeros(1, 1, 0))
    path = out / f"{task['id']}.wav.npy"
    np.save(path, wav.reshape(-1).numpy().astype(np.float32))
    return {"id": task["id"], "wav": path.name}


def run_s3gen(s3gen, task: dict, out: Path) -> dict:  # noqa: ANN001
    def ref_dict() -> dict:  # S3Gen casts the dict's tensors in place: a fresh one per call
        prompt = torch.tensor(task["prompt_token"], dtype=torch.long).view(1, -1)
        return {
            "prompt_token": prompt,
            "prompt_token_len": torch.tensor([prompt.shape[1]]),
            "prompt_feat": torch.from_numpy(np.load(task["prompt_feat"])),
            "prompt_feat_len": None,
            "embedding": torch.from_numpy(np.load(task["embedding"])),
        }

    tokens = torch.tensor(task["tokens"], dtype=torch.long)
    torch.manual_seed(task["seed"])
    mel = s3gen.flow_inference(tokens, ref_dict=ref_dict(), n_cfm_timesteps=2, finalize=True)
    torch.manual_seed(task["seed"])
    wav, _ = s3gen.inference(speech_tokens=tokens, ref_dict=ref_dict(), n_cfm_timesteps=2)
    wav_path, mel_path = out / f"{task['id']}.wav.npy", out / f"{task['id']}.mel.npy"
    np.save(wav_path, wav.reshape(-1).numpy().astype(np.float32))
    np.save(mel_path, mel.float().numpy())
    return {"id": task["id"], "wav": wav_path.name, "mel": mel_path.name}


def run_s3gen_stream(s3gen, task: dict, out: Path) -> dict:  # noqa: ANN001
    """A unit decoded chunk by chunk as the reference's ``finalize=False`` path
    decodes a prefix: for each (end, view) of task["chunks"], after
    ``torch.manual_seed(seed)``, the flow over tokens[:view] (``finalize`` when
    ``view - end < 3``), HiFT's ``inference`` with ``cache_source`` the excitation
    of the samples earlier chunks gave, the call's fade-in; the chunk's samples
    (from the previous end to ``end`` tokens) -> OUT/<id>.c<k>.npy.

    Release 0.1.7 cannot run ``finalize=False`` as shipped, and this is the whole
    stand-in: ``CausalMaskedDiffWithXvec.inference`` cuts the look-ahead's 6 frames
    off ``mu`` but hands the decoder the encoder's mask uncut, and the decoder fails
    ("size of tensor a (38) must match ... b (44)"); and ``flow_inference`` draws the
    new frames' noise for every token of the call, the held-back ones too, so it
    would land 6 frames early, over the prompt's. Here the decoder's mask is cut to
    ``mu``'s length and the noise is drawn at the cut length (the same draw, in the
    same place)."""
    from chatterbox.models.s3gen.s3gen import S3Token2Mel

    decoder = s3gen.flow.decoder
    forward = decoder.forward

    def cut_mask(mu, mask, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        return forward(mu, mask[..., : mu.shape[-1]], *args, **kwargs)

    prompt = torch.tensor(task["prompt_token"], dtype=torch.long).view(1, -1)
    tokens = torch.tensor(task["tokens"], dtype=torch.long)
    played = torch.zeros(1, 1, 0)
    found, start = {"id": task["id"]}, 0
    decoder.forward = cut_mask
    try:
        for k, (end, view) in enumerate(task["chunks"]):
            ref_dict = {
                "prompt_token": prompt,
                "prompt_token_len": torch.tensor([prompt.shape[1]]),
                "prompt_feat": torch.from_numpy(np.load(task["prompt_feat"])),
                "prompt_feat_len": None,
                "embedding": torch.from_numpy(np.load(task["embedding"])),
            }
            finalize = view - end < 3
            kept = view if finalize else view - 3
            torch.manual_seed(task["seed"])
            with torch.inference_mode():
                noise = torch.randn(1, 80, 2 * kept)
                mel = S3Token2Mel.forward(
                    s3gen,
                    tokens[None, :view],
                    ref_wav=None,
                    ref_sr=None,
                    ref_dict=ref_dict,
                    n_cfm_timesteps=2,
                    finalize=finalize,
                    noised_mels=noise,
                )
                wav, source = s3gen.mel2wav.inference(speech_feat=mel, cache_source=played)
                wav[:, : len(s3gen.trim_fade)] *= s3gen.trim_fade
            played = source[:, :, : 960 * end]
            path = out / f"{task['id']}.c{k}.npy"
            np.save(path, wav.reshape(-1)[960 * start : 960 * end].numpy().astype(np.float32))
            found[f"c{k}"] = path.name
            start = end
    finally:
        decoder.forward = forward
    return found


def run_conds(ckpt: Path, task: dict, out: Path) -> dict:
    from chatterbox.tts_turbo import Conditionals

    return save_conds(Conditionals.load(ckpt / "conds.pt"), task, out)


@cache
def t3_of(ckpt: Path, sizes: str):  # noqa: ANN201 (a reference object)
    """T3 built once a run; ``sizes``: the job's "t3_sizes" as JSON (null: GPT-2 medium)."""
    return build_t3(ckpt, json.loads(sizes))


@cache
def build_tts(ckpt: Path, t3, s3gen):  # noqa: ANN001, ANN201 (reference objects)
    from chatterbox.models.voice_encoder import VoiceEncoder
    from chatterbox.tts_turbo import ChatterboxTurboTTS

    ve = VoiceEncoder()
    ve.load_state_dict(load_file(str(ckpt / "ve.safetensors")))
    return ChatterboxTurboTTS(t3, s3gen, ve.eval(), tokenizer=None, device="cpu")


def run_clone(tts, task: dict, out: Path) -> dict:  # noqa: ANN001
    with torch.inference_mode():
        tts.prepare_conditionals(task["wav"])
    return save_conds(tts.conds, task, out)


def save_conds(conds, task: dict, out: Path) -> dict:  # noqa: ANN001
    found = {"id": task["id"]}
    fields = [("t3", conds.t3.__dict__), ("gen", conds.gen)]
    for section, values in fields:
        for key, value in values.items():
            if torch.is_tensor(value):
                name = f"{section}_{key}"
                np.save(
                    out / f"{task['id']}.{name}.npy",
                    value.detach().cpu().float().numpy()
                    if value.is_floating_point()
                    else value.cpu().numpy(),
                )
                found[name] = f"{task['id']}.{name}.npy"
    return found


def run_text(tokenizer, task: dict, out: Path) -> dict:  # noqa: ANN001
    from chatterbox.tts_turbo import punc_norm

    text = punc_norm(task["text"])
    ids = tokenizer(text, return_tensors="pt", padding=True, truncation=True).input_ids
    path = out / f"{task['id']}.ids.npy"
    np.save(path, ids.reshape(-1).numpy().astype(np.int64))
    return {"id": task["id"], "ids": path.name, "normalized": text}


@cache
def load_tokenizer(ckpt: Path):  # noqa: ANN201
    from transformers import AutoTokenizer

    # As ChatterboxTurboTTS.from_local loads it.
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def t3_for(job: jobs.Job):  # noqa: ANN201 (a reference object)
    return t3_of(job.ckpt, json.dumps(job.spec.get("t3_sizes")))


def tts_for(job: jobs.Job):  # noqa: ANN201 (a reference object)
    return build_tts(job.ckpt, t3_for(job), build_s3gen(job.ckpt))


if __name__ == "__main__":
    jobs.run(
        {
            "t3": lambda task, job: run_t3(t3_for(job), task, job.out),
            "hift": lambda task, job: run_hift(build_s3gen(job.ckpt), task, job.out),
            "s3gen": lambda task, job: run_s3gen(build_s3gen(job.ckpt), task, job.out),
            "s3gen_stream": lambda task, job: run_s3gen_stream(
                build_s3gen(job.ckpt), task, job.out
            ),
            "conds": lambda task, job: run_conds(job.ckpt, task, job.out),
            "clone": lambda task, job: run_clone(tts_for(job), task, job.out),
            "text": lambda task, job: run_text(load_tokenizer(job.ckpt), task, job.out),
        }
    )
