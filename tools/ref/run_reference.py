"""Run the reference package qwen-tts==0.1.1 on a checkpoint; write codes and waveforms.

Executed with .venv-ref's python (never imported by the server):

    .venv-ref/bin/python tools/ref/run_reference.py CHECKPOINT_DIR JOB.json OUT_DIR

JOB.json: {"tasks": [TASK, ...]}; each TASK has "kind" and an "id":
- {"kind": "generate", "id", "text", "language", "speaker"?, "instruct"?,
   "ref_audio"? (path of a float32 .npy at "ref_sr"), "ref_sr"?, "ref_text"?,
   "x_vector_only"?, "speaker_embedding"? (path of .npy), "non_streaming_mode",
   "max_new_tokens", "greedy": true, "repetition_penalty"?}
  -> OUT/<id>.codes.npy [frames, 16] int64 and OUT/<id>.wav.npy float32
     (and for voice clone OUT/<id>.ref_codes.npy, OUT/<id>.xvector.npy)
- {"kind": "decode", "id", "codes" (path of [frames, 16] .npy)} -> OUT/<id>.wav.npy
- {"kind": "clone_prompt", "id", "ref_audio", "ref_sr", "ref_text"?, "x_vector_only"?}
  -> OUT/<id>.ref_codes.npy (unless x-vector only), OUT/<id>.xvector.npy
- {"kind": "mel_filters", "id", "sr", "n_fft", "n_mels", "fmin", "fmax"} -> OUT/<id>.npy
OUT/result.json lists what was written. The loaded weights are checked to be
exactly the checkpoint's tensors (Hugging Face only warns on missing keys).
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Stand-ins for modules qwen-tts imports but the 12 Hz path never uses; real ones win.
sys.path.append(str(HERE / "stubs"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402


def _load_file_tensors(directory: Path) -> dict[str, torch.Tensor]:
    files = sorted(directory.glob("*.safetensors"))
    out: dict[str, torch.Tensor] = {}
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118
                out[key] = handle.get_tensor(key)
    return out


def _check_loaded(module: torch.nn.Module, directory: Path) -> None:
    expected = _load_file_tensors(directory)
    state = module.state_dict()
    missing = sorted(set(state) - set(expected))
    unused = sorted(set(expected) - set(state))
    if missing or unused:
        raise SystemExit(
            f"reference/checkpoint key mismatch in {directory}: "
            f"not in checkpoint {missing[:5]}, not used {unused[:5]}"
        )
    for key, value in state.items():
        if not torch.equal(value.float(), expected[key].float()):
            raise SystemExit(f"reference loaded a different tensor for {key}")


def main() -> None:
    ckpt, job_path, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, int(os.environ.get("REF_THREADS", "2"))))
    from qwen_tts import Qwen3TTSModel

    job = json.loads(job_path.read_text())
    wrapper = Qwen3TTSModel.from_pretrained(str(ckpt), dtype=torch.float32, device_map="cpu")
    model = wrapper.model
    _check_loaded(model, ckpt)
    _check_loaded(model.speech_tokenizer.model, ckpt / "speech_tokenizer")
    results = []
    for task in job["tasks"]:
        kind = task["kind"]
        tid = task["id"]
        if kind == "generate":
            results.append(_generate(wrapper, task, out))
        elif kind == "decode":
            codes = torch.from_numpy(np.load(task["codes"])).long()
            wavs, sr = model.speech_tokenizer.decode([{"audio_codes": codes}])
            np.save(out / f"{tid}.wav.npy", wavs[0].astype(np.float32))
            results.append({"id": tid, "sample_rate": sr})
        elif kind == "clone_prompt":
            items = _clone_prompt(wrapper, task)
            _save_prompt(items[0], out, tid)
            results.append({"id": tid})
        elif kind == "mel_filters":
            from librosa.filters import mel

            filters = mel(
                sr=task["sr"],
                n_fft=task["n_fft"],
                n_mels=task["n_mels"],
                fmin=task["fmin"],
                fmax=task["fmax"],
            )
            np.save(out / f"{tid}.npy", filters)
            results.append({"id": tid})
        else:
            raise SystemExit(f"unknown task kind {kind!r}")
    (out / "result.json").write_text(json.dumps({"results": results}, indent=2))


def _clone_prompt(wrapper, task):  # noqa: ANN001, ANN202
    audio = np.load(task["ref_audio"]).astype(np.float32)
    return wrapper.create_voice_clone_prompt(
        ref_audio=(audio, int(task["ref_sr"])),
        ref_text=task.get("ref_text"),
        x_vector_only_mode=bool(task.get("x_vector_only", False)),
    )


def _save_prompt(item, out: Path, tid: str) -> None:  # noqa: ANN001
    if item.ref_code is not None:
        np.save(out / f"{tid}.ref_codes.npy", item.ref_code.cpu().numpy().astype(np.int64))
    np.save(out / f"{tid}.xvector.npy", item.ref_spk_embedding.float().cpu().numpy())


def _generate(wrapper, task: dict, out: Path) -> dict:  # noqa: ANN001
    """Mirror the wrapper's generate_* methods, but keep the codes they discard."""
    model = wrapper.model
    tid = task["id"]
    language = task.get("language", "auto")
    greedy = bool(task.get("greedy", True))
    kwargs = {
        "non_streaming_mode": bool(task["non_streaming_mode"]),
        "max_new_tokens": int(task["max_new_tokens"]),
        "do_sample": not greedy,
        "subtalker_dosample": not greedy,
        "repetition_penalty": float(task.get("repetition_penalty", 1.05)),
    }
    input_ids = wrapper._tokenize_texts([wrapper._build_assistant_text(task["text"])])
    instruct_ids = None
    if task.get("instruct"):
        instruct_ids = [
            wrapper._tokenize_texts([wrapper._build_instruct_text(task["instruct"])])[0]
        ]
    extra: dict = {}
    ref_code = None
    if model.tts_model_type == "base":
        if task.get("speaker_embedding"):
            emb = torch.from_numpy(np.load(task["speaker_embedding"])).float()
            prompt = {
                "ref_code": [None],
                "ref_spk_embedding": [emb],
                "x_vector_only_mode": [True],
                "icl_mode": [False],
            }
            extra = {"voice_clone_prompt": prompt, "ref_ids": [None]}
        else:
            items = _clone_prompt(wrapper, task)
            _save_prompt(items[0], out, tid)
            ref_code = items[0].ref_code
            prompt = wrapper._prompt_items_to_voice_clone_prompt(items)
            ref_ids = [None]
            if items[0].ref_text:
                ref_ids = [wrapper._tokenize_texts([wrapper._build_ref_text(items[0].ref_text)])[0]]
            extra = {"voice_clone_prompt": prompt, "ref_ids": ref_ids}
    elif model.tts_model_type == "custom_voice":
        extra = {"speakers": [task["speaker"]], "instruct_ids": instruct_ids}
        if model.tts_model_size in "0b6":
            extra["instruct_ids"] = None
    else:
        extra = {"instruct_ids": instruct_ids}
    codes_list, _ = model.generate(input_ids=input_ids, languages=[language], **extra, **kwargs)
    codes = codes_list[0]
    np.save(out / f"{tid}.codes.npy", codes.cpu().numpy().astype(np.int64))
    full = codes if ref_code is None else torch.cat([ref_code.to(codes.device), codes], dim=0)
    result: dict = {"id": tid, "frames": int(codes.shape[0])}
    if codes.shape[0] > 0:
        wavs, sr = model.speech_tokenizer.decode([{"audio_codes": full}])
        wav = wavs[0]
        if ref_code is not None:
            cut = int(ref_code.shape[0] / max(full.shape[0], 1) * wav.shape[0])
            wav = wav[cut:]
        np.save(out / f"{tid}.wav.npy", wav.astype(np.float32))
        result["sample_rate"] = sr
    return result


if __name__ == "__main__":
    main()
