"""Run the reference text front end (voxtream==0.2.5 in .venv-ref-voxtream) on a job.

Executed with .venv-ref-voxtream's python (never imported by the server):

    .venv-ref-voxtream/bin/python tools/ref/voxtream/ref_text.py CKPT JOB.json OUT

CKPT holds ``phoneme_to_token.json``. The reference's own functions run as its generator
calls them: ``english_normalizer``, ``ESpeak()`` (the phonemizer ``SpeechGenerator``
builds: the ``espeak-ng`` command per piece), ``text_to_phone_tokens`` and
``build_text_progress_metadata`` with a config carrying the generator.json values that
matter here (``punct_map``, ``text_context``, ``text_context_length``; overridable in
JOB), and ``text_generator`` for the pieces of a streamed text.

Importing ``voxtream.utils.generator.text`` builds the reference's three real-size
Llama stacks (``voxtream.utils.model.MODEL_POOL``, ~3 GB) at import; none of them is
used by the text functions, so the torchtune builder is swapped for an empty module
first.

JOB.json: {"tasks": [TASK, ...], "punct_map"?, "text_context"?, "text_context_length"?};
each TASK has "kind", "id" and "text":
- "whole": {normalized, phonemes, ids, punct_ins, punct_del, punct_ids, phones, spans}:
  ``text_to_phone_tokens(text, return_phonemes=True)``, ``phonemes`` =
  ``phonemize(english_normalizer(text))``, ``spans`` = [[label, start, end], ...] of
  ``build_text_progress_metadata(text, max_phone_tokens=task.get("max_phones"))``;
  with "normalize": false, both functions get ``normalize=False``.
- "piece": {normalized, ids, punct_ins, punct_del, punct_ids, phones}:
  ``text_to_phone_tokens(text, full_streaming=True, return_phonemes=True)``.
- "stream": {pieces: [the same as "piece" for each chunk, plus "text"]} over
  ``text_generator(text)``.
- "phonemize": {phonemes}: ``ESpeak().phonemize(text)`` (no normalisation).
- "espeak": {lines}: the command's raw output lines for ``text`` (``_espeak_exe``).
A task the reference fails on gives {"error": "<exception>"}.
OUT/result.json: {"results": [{"id", ...}, ...], "espeak_version"}.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE / "stubs"))  # g2p_en etc.: imported, never called here
os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torchtune.models.llama3_2 as llama  # noqa: E402

llama.llama3_2 = lambda **_: torch.nn.Module()  # MODEL_POOL: unused here, never built

from voxtream.utils.generator import text_generator  # noqa: E402
from voxtream.utils.generator.text import (  # noqa: E402
    build_text_progress_metadata,
    text_to_phone_tokens,
)
from voxtream.utils.text.normalizer import english_normalizer  # noqa: E402
from voxtream.utils.text.phonemizer import ESpeak, _espeak_exe  # noqa: E402

GENERATOR_JSON = {
    "punct_map": {".": 117, ",": 118, "?": 119, "!": 121},
    "text_context": " context",
    "text_context_length": 18,
}


def _ints(values: Any) -> list[int]:
    return [int(v) for v in values]


def _tokens(text: str, env: SimpleNamespace, **options: Any) -> dict[str, Any]:
    ids, ins, dels, puncts, phones = text_to_phone_tokens(
        text,
        config=env.config,
        phone_to_token=env.table,
        phonemizer=env.phonemizer,
        return_phonemes=True,
        **options,
    )
    return {
        "ids": _ints(ids),
        "punct_ins": _ints(ins),
        "punct_del": _ints(dels),
        "punct_ids": _ints(puncts),
        "phones": list(phones),
    }


def run_whole(task: dict, env: SimpleNamespace) -> dict[str, Any]:
    text, normalize = task["text"], task.get("normalize", True)
    normalized = english_normalizer(text) if normalize else text
    meta = build_text_progress_metadata(
        text,
        config=env.config,
        phone_to_token=env.table,
        phonemizer=env.phonemizer,
        normalize=normalize,
        max_phone_tokens=task.get("max_phones"),
    )
    return {
        "normalized": normalized,
        "phonemes": env.phonemizer.phonemize(normalized, language="en-us"),
        **_tokens(text, env, normalize=normalize),
        "spans": [[w.text, w.start, w.end] for w in meta.words],
        "span_phones": list(meta.phones),
    }


def run_piece(task: dict, env: SimpleNamespace) -> dict[str, Any]:
    text = task["text"]
    return {"normalized": english_normalizer(text), **_tokens(text, env, full_streaming=True)}


def run_stream(task: dict, env: SimpleNamespace) -> dict[str, Any]:
    pieces = []
    for chunk in text_generator(task["text"]):
        pieces.append({"text": chunk, **run_piece({"text": chunk}, env)})
    return {"pieces": pieces}


def run_phonemize(task: dict, env: SimpleNamespace) -> dict[str, Any]:
    return {"phonemes": env.phonemizer.phonemize(task["text"], language="en-us")}


def run_espeak(task: dict, env: SimpleNamespace) -> dict[str, Any]:
    args = ["-v", "en-us", "--ipa=1", task["text"]]
    lines = _espeak_exe(env.phonemizer.backend, args, sync=True)
    return {"lines": [line.decode("utf8") for line in lines]}


HANDLERS = {
    "whole": run_whole,
    "piece": run_piece,
    "stream": run_stream,
    "phonemize": run_phonemize,
    "espeak": run_espeak,
}


def main() -> None:
    ckpt, job_path, out = (Path(arg) for arg in sys.argv[1:4])
    spec = json.loads(job_path.read_text())
    settings = {k: spec.get(k, v) for k, v in GENERATOR_JSON.items()}
    phonemizer = ESpeak()
    env = SimpleNamespace(
        config=SimpleNamespace(**settings),
        table=json.loads((ckpt / "phoneme_to_token.json").read_text()),
        phonemizer=phonemizer,
    )
    results = []
    for task in spec["tasks"]:
        try:
            results.append({"id": task["id"], **HANDLERS[task["kind"]](task, env)})
        except Exception as error:  # the reference's own failures are results too
            results.append({"id": task["id"], "error": f"{type(error).__name__}: {error}"})
    out.mkdir(parents=True, exist_ok=True)
    report = {"results": results, "espeak_version": phonemizer.backend_version}
    (out / "result.json").write_text(json.dumps(report, ensure_ascii=False))


if __name__ == "__main__":
    main()
