"""Run the reference side of VoXtream's voice prompt inputs (voxtream==0.2.5 and
torchaudio in .venv-ref-voxtream): ReDimNet's mel front end as torchaudio computes
it, torchaudio's ``Resample``, and the prompt audio path of ``prepare_prompt``.

Executed with .venv-ref-voxtream's python (never imported by the server):

    .venv-ref-voxtream/bin/python tools/ref/voxtream/ref_speaker.py CKPT JOB.json OUT

CKPT is not read (ReDimNet's own code is not in the environment: it comes from
GitHub, not PyPI). JOB.json: {"tasks": [TASK, ...]}; each TASK has "kind" and "id":

- {"kind": "mel", "wav" (a float32 .npy [samples] at 16 kHz), "n_mels"?, "hop_length"?}
  -> OUT/<id>.power.npy float32 [n_mels, frames]: ``torchaudio.transforms.
  MelSpectrogram(sample_rate=16000, n_fft=512, win_length=400, hop_length, f_min=20,
  f_max=7600, n_mels, window_fn=torch.hamming_window)`` (ReDimNet's ``MelBanks``) of
  the pre-emphasised clip (``y[n] = x[n] - 0.97 x[n-1]``, ``x[-1]`` reflected to
  ``x[1]``); OUT/<id>.features.npy: ``log(power + 1e-6)``, each bin's mean over the
  frames subtracted (``spec_norm="mn"``); OUT/<id>.fb.npy [257, n_mels] and
  OUT/<id>.window.npy [400]: the transform's filter matrix and window buffers
- {"kind": "resample", "wav", "orig_sr", "new_sr"}
  -> OUT/<id>.wav.npy float32: ``torchaudio.transforms.Resample(orig_sr, new_sr)``
- {"kind": "prompt", "wav_file" (an audio file), "normalize" (bool)}
  -> voxtream's own ``prepare_prompt`` (``voxtream/utils/generator/prompt.py``) on the
  file, with ``normalize_loudness``, no VAD, no enhancement, on CPU in float32, and the
  0.2.5 ``configs/generator.json`` values it reads. Its Mimi and speaker encoder are
  stand-ins that record what they are handed: OUT/<id>.mimi.npy float32 (the 24 kHz
  clip), OUT/<id>.speaker.npy float32 (the 16 kHz clip); the stand-in encoder
  returns the mean magnitude of 192 equal slices of its clip, and the reference
  normalises that: OUT/<id>.embedding.npy float32 [192]. When the reference
  refuses the clip: {"error": its message}.
  ``torchaudio.load`` reads files through torchcodec from torchaudio 2.9 on, which
  the environment lacks; it is replaced by soundfile's float32 read ([channels,
  samples], 16-bit samples / 32768, as torchaudio returns them).
OUT/result.json: {"results": [...] in task order, "torchaudio": its version}.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE / "stubs"))  # g2p_en, sphn, ...: imported by voxtream, never called
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("NO_CUDA_GRAPH", "1")
warnings.filterwarnings("ignore")

GENERATOR_0_2_5 = {
    "sil_token": 120, "bos_token": 123, "eos_token": 124, "unk_token": 122, "eop_token": 122,
    "num_codebooks": 16, "num_phones_per_frame": 2, "audio_delay_frames": 1,
    "temperature": 0.9, "topk": 5, "top_p": 0.9, "max_audio_length_ms": 60000,
    "model_repo": "herimor/voxtream2.1", "model_name": "model.safetensors",
    "model_weight_path": None, "model_config_name": "config.json", "mimi_sr": 24000,
    "mimi_vocab_size": 2048, "mimi_frame_ms": 80, "mimi_repo": "kyutai/moshiko-pytorch-bf16",
    "mimi_name": "tokenizer-e351c8d8-checkpoint125.safetensors", "spk_enc_sr": 16000,
    "spk_enc_repo": "IDRnD/ReDimNet", "spk_enc_model": "ReDimNet", "spk_enc_model_name": "M",
    "spk_enc_train_type": "ft_mix", "spk_enc_dataset": "vb2+vox2+cnc",
    "phoneme_dict_name": "phoneme_to_token.json", "max_prompt_sec": 20, "min_prompt_sec": 1,
    "max_phone_tokens": 2000, "cache_prompt": False, "cfg_gamma": 1.5, "cfg_ac_gamma": 2.0,
    "text_context": " context", "text_context_length": 18, "spk_proj_weight": 1.0,
    "audio_pad_token": 2049, "enhance_prompt": False, "sidon_se_reload_model": False,
    "reset_streaming_state": False, "hf_token": None, "apply_vad": False,
    "normalize_prompt_loudness": True, "prompt_loudness_lufs": -23.0, "min_speech_seg_sec": 0.3,
    "min_look_ahead_phones": 3, "phonemizer": "espeak", "spk_rate_window_sec": 2.0,
    "frame_repeat_counter": 25, "punct_map": {".": 117, ",": 118, "?": 119, "!": 121},
    "phoneme_index_map": {
        "0": [0, 1], "1": [0, 2], "2": [1, 1], "3": [1, 2], "4": [2, 1], "5": [2, 2]
    },
}  # fmt: skip
"""``configs/generator.json`` of the voxtream 0.2.5 sdist (not in the wheel)."""


def load_wav(path: str):  # noqa: ANN201
    import numpy as np
    import torch

    wav = np.load(path).astype(np.float32)
    if wav.ndim != 1:
        raise SystemExit(f"{path}: a clip is 1-D, got shape {wav.shape}")
    return torch.from_numpy(wav)


def run_mel(task: dict, out: Path) -> dict:
    import numpy as np
    import torch
    import torchaudio

    x = load_wav(task["wav"])
    y = torch.cat([x[:1] - 0.97 * x[1:2], x[1:] - 0.97 * x[:-1]])
    mel = torchaudio.transforms.MelSpectrogram(
        sample_rate=16000,
        n_fft=512,
        win_length=400,
        hop_length=int(task.get("hop_length", 160)),
        f_min=20,
        f_max=7600,
        n_mels=int(task.get("n_mels", 72)),
        window_fn=torch.hamming_window,
    )
    with torch.no_grad():
        power = mel(y[None])[0]
        logs = torch.log(power + 1e-6)
        features = logs - logs.mean(dim=-1, keepdim=True)
    found = {"id": task["id"]}
    arrays = {
        "power": power,
        "features": features,
        "fb": mel.mel_scale.fb,
        "window": mel.spectrogram.window,
    }
    for name, value in arrays.items():
        np.save(out / f"{task['id']}.{name}.npy", value.float().numpy())
        found[name] = f"{task['id']}.{name}.npy"
    return found


def run_resample(task: dict, out: Path) -> dict:
    import numpy as np
    import torch
    from torchaudio.transforms import Resample

    wav = load_wav(task["wav"])[None]
    with torch.no_grad():
        resampled = Resample(int(task["orig_sr"]), int(task["new_sr"]))(wav)[0]
    path = out / f"{task['id']}.wav.npy"
    np.save(path, resampled.float().numpy())
    return {"id": task["id"], "wav": path.name}


class _Recorder(dict):
    """What a stand-in encoder was handed, by name."""


def _stand_ins(seen: _Recorder):  # noqa: ANN202
    import torch

    class Mimi:
        def encode(self, x: torch.Tensor) -> torch.Tensor:
            seen["mimi"] = x.detach().clone()
            frames = -(-x.shape[-1] // 1920)
            return torch.zeros(1, 16, frames, dtype=torch.int64)

    class Speaker(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen["speaker"] = x.detach().clone()
            usable = x.shape[-1] // 192 * 192
            return x[:, :usable].reshape(192, -1).abs().mean(dim=1)[None]

    return Mimi(), Speaker()


def run_prompt(task: dict, out: Path) -> dict:
    import numpy as np
    import soundfile
    import torch
    import torchaudio
    from voxtream.config import SpeechGeneratorConfig
    from voxtream.utils.generator.prompt import prepare_prompt

    def load(path: str) -> tuple[torch.Tensor, int]:
        data, rate = soundfile.read(path, dtype="float32", always_2d=True)
        return torch.from_numpy(np.ascontiguousarray(data.T)), rate

    torchaudio.load = load
    seen = _Recorder()
    mimi, speaker = _stand_ins(seen)
    name = task["id"]
    try:
        _, embedding, *_ = prepare_prompt(
            Path(task["wav_file"]),
            SpeechGeneratorConfig(**GENERATOR_0_2_5),
            logging.getLogger("voxtream"),
            "cpu",
            torch.float32,
            2,
            mimi,
            speaker,
            None,
            None,
            enhance_prompt=False,
            apply_vad=False,
            normalize_loudness=bool(task["normalize"]),
        )
    except AssertionError as exc:
        return {"id": name, "error": str(exc)}
    found = {"id": name}
    values = {
        "mimi": seen["mimi"].reshape(-1),
        "speaker": seen["speaker"].reshape(-1),
        "embedding": embedding[0],
    }
    for key, value in values.items():
        np.save(out / f"{name}.{key}.npy", value.float().numpy())
        found[key] = f"{name}.{key}.npy"
    return found


def main() -> None:
    import torch
    import torchaudio

    if not hasattr(torchaudio, "transforms"):
        raise SystemExit(f"torchaudio at {torchaudio.__file__} is not the real package")
    _, job_path, out = (Path(arg) for arg in sys.argv[1:4])
    torch.set_num_threads(int(os.environ.get("REF_THREADS", "2")))
    job = json.loads(job_path.read_text())
    out.mkdir(parents=True, exist_ok=True)
    handlers = {"mel": run_mel, "resample": run_resample, "prompt": run_prompt}
    results = []
    for task in job["tasks"]:
        handler = handlers.get(task["kind"])
        if handler is None:
            raise SystemExit(f"unknown task kind {task['kind']!r}; known: {sorted(handlers)}")
        results.append(handler(task, out))
    (out / "result.json").write_text(
        json.dumps({"results": results, "torchaudio": torchaudio.__version__})
    )


if __name__ == "__main__":
    main()
