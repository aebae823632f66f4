"""Run the reference package chatterbox-tts==0.1.7's cloning front end on given clips.

Executed with .venv-ref-chatterbox's python (never imported by the server):

    .venv-ref-chatterbox/bin/python tools/ref/chatterbox/ref_voice.py CKPT JOB.json OUT

JOB.json: {"tasks": [TASK, ...]}; each TASK has "kind" and "id":
- {"kind": "embed", "id", "wav" (path of a float32 .npy [samples] at 16 kHz)}
   -> OUT/<id>.embedding.npy float32 [256]: the reference ``VoiceEncoder``, built and
   loaded from CKPT/ve.safetensors as ``ChatterboxTurboTTS.from_local`` does, on
   ``embeds_from_wavs([wav], sample_rate=16000)`` averaged over its one row, as
   ``prepare_conditionals`` makes T3's speaker embedding
- {"kind": "mel", "id", "wav" (as for "embed")} -> OUT/<id>.mel.npy float32 [frames, 40]:
   the mel spectrogram ``embeds_from_wavs`` feeds the network (the clip trimmed by
   ``librosa.effects.trim`` at its default top_db of 20, then ``melspectrogram``)
- {"kind": "loudness", "id", "wav" (path of a float32 .npy [samples]), "sample_rate",
   "target_lufs"?} -> OUT/<id>.wav.npy: ``ChatterboxTurboTTS.norm_loudness`` (which
   uses nothing of the model it is a method of), in the dtype it returns
OUT/result.json lists what was written.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jobs  # first: the reference's environment
import numpy as np
import torch
from safetensors.torch import load_file


@cache
def build_voice_encoder(ckpt: Path):  # noqa: ANN201 (a reference object)
    from chatterbox.models.voice_encoder import VoiceEncoder

    # As ChatterboxTurboTTS.from_local builds it (load_state_dict strict by default).
    ve = VoiceEncoder()
    ve.load_state_dict(load_file(ckpt / "ve.safetensors"))
    return ve.eval()


def run_embed(ve, task: dict, out: Path) -> dict:  # noqa: ANN001
    wav = np.load(task["wav"])
    # As prepare_conditionals calls it on the 16 kHz clip.
    embeds = torch.from_numpy(ve.embeds_from_wavs([wav], sample_rate=16000))
    embedding = embeds.mean(axis=0, keepdim=True)
    path = out / f"{task['id']}.embedding.npy"
    np.save(path, embedding.reshape(-1).numpy().astype(np.float32))
    return {"id": task["id"], "embedding": path.name}


def run_mel(task: dict, out: Path) -> dict:
    import librosa
    from chatterbox.models.voice_encoder import VoiceEncConfig
    from chatterbox.models.voice_encoder.melspec import melspectrogram

    wav = np.load(task["wav"])
    trimmed = librosa.effects.trim(wav, top_db=20)[0]  # embeds_from_wavs's trim_top_db
    path = out / f"{task['id']}.mel.npy"
    np.save(path, melspectrogram(trimmed, VoiceEncConfig()).T.astype(np.float32))
    return {"id": task["id"], "mel": path.name}


def run_loudness(task: dict, out: Path) -> dict:
    from chatterbox.tts_turbo import ChatterboxTurboTTS

    wav = np.load(task["wav"])
    normed = ChatterboxTurboTTS.norm_loudness(
        None, wav, task["sample_rate"], target_lufs=task.get("target_lufs", -27)
    )
    path = out / f"{task['id']}.wav.npy"
    np.save(path, np.asarray(normed))
    return {"id": task["id"], "wav": path.name}


if __name__ == "__main__":
    jobs.run(
        {
            "embed": lambda task, job: run_embed(build_voice_encoder(job.ckpt), task, job.out),
            "mel": lambda task, job: run_mel(task, job.out),
            "loudness": lambda task, job: run_loudness(task, job.out),
        }
    )
