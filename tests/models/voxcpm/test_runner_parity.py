"""The served VoxCPM2 runner against voxcpm==2.0.3's own generation, three contexts batched.

Three requests of different prompt lengths and settings run together through the runner
the server drives (loaded from the checkpoint directory by the family's loader): a
zero-shot text, a voice cloned from audio alone (the reference's "reference" prompt) and
one cloned from audio and its transcript (reference + continuation), each with its own
seed and guidance. The reference runs each alone with the same initial noise (the
runner's counter-based draws, fed to it): every patch within 1e-4 of the reference's,
the same stop step (or cap), and the audio of the patches, decoded in the engine's chunks
by the served vocoder, within 1e-4 of the reference's streamed decode.
"""

from __future__ import annotations

import io
import wave
from pathlib import Path

import numpy as np
import pytest

from models.base import CLONE_VOICE, Admit, DecodeItem, Feed, StepPlan, SynthParams
from models.random_draws import key_of
from models.voxcpm.loader import load
from tests.models.reference_env import outputs, run_script
from tests.models.voxcpm.ckpt import build

REPO = Path(__file__).resolve().parents[3]
PYTHON = REPO / ".venv-ref-voxcpm" / "bin" / "python"
SCRIPT = REPO / "tools" / "ref" / "voxcpm" / "run_reference.py"
SETUP = "tools/ref/voxcpm/make_venv.sh"
REF_TEXT = "This is the voice."
JOBS = {
    # id: text, seed, cfg, max_len, clone (None | "reference" | "both")
    "a": ("Hello there, how are you?", 3, 2.0, 12, None),
    "b": ("A second and longer sentence for the model to speak today.", 4, 2.0, 12, "reference"),
    "c": ("Short.", 5, 3.0, 3, "both"),
}
DRAWS = 16


def _wav(path: Path) -> bytes:
    """0.9 s of 24 kHz stereo 16-bit audio (a voice-like chirp with noise)."""
    rate = 24000
    t = np.arange(int(0.9 * rate)) / rate
    rng = np.random.default_rng(1)
    left = 0.3 * np.sin(2 * np.pi * (140 + 80 * t) * t) + 0.02 * rng.standard_normal(len(t))
    right = 0.25 * np.sin(2 * np.pi * 220 * t) + 0.02 * rng.standard_normal(len(t))
    frames = (np.stack((left, right), axis=1) * 32767).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(frames.tobytes())
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("voxcpm-runner")
    ckpt = build(root / "ckpt", seed=8)
    clip = _wav(root / "voice.wav")
    loaded = load({"max_contexts": 3}, ckpt)
    return {"root": root, "ckpt": ckpt, "clip": clip, "loaded": loaded}


def _served(loaded, clip: bytes) -> dict[str, list[np.ndarray]]:
    runner = loaded.runner
    admits, feeds = [], []
    for slot, (text, seed, cfg, cap, clone) in enumerate(JOBS.values()):
        extra: dict = {"seed": seed, "cfg_value": cfg, "max_new_tokens": cap}
        voice = "default"
        if clone:
            voice = CLONE_VOICE
            extra["ref_audio"] = clip
            if clone == "both":
                extra["ref_text"] = REF_TEXT
        params = SynthParams(voice=voice, extra=extra)
        runner.validate(params)
        admits.append(Admit(slot, runner.prepare(params)))
        feeds.append(Feed(slot, tuple(runner.encode_text(text)), close=True))
    rows = np.arange(len(JOBS))
    made: dict[int, list[np.ndarray]] = {slot: [] for slot in rows.tolist()}
    plan = StepPlan(np.zeros(0, np.int64), tuple(admits), tuple(feeds), rows)
    done = np.zeros(len(rows), bool)
    for _ in range(40):
        result = runner.execute(plan)
        at = 0
        for i, slot in enumerate(plan.step.tolist()):
            made[slot].extend(result.frames[at : at + result.counts[i]])
            at += result.counts[i]
            done[slot] |= result.finished[i]
        if done.all():
            break
        plan = StepPlan(np.zeros(0, np.int64), (), (), rows[~done])
    assert done.all()
    return {job: made[slot] for slot, job in enumerate(JOBS)}


@pytest.fixture(scope="module")
def compared(setup: dict) -> tuple[dict, dict]:
    loaded, root = setup["loaded"], setup["root"]
    ours = _served(loaded, setup["clip"])
    jobs = []
    for job, (text, seed, cfg, cap, clone) in JOBS.items():
        noise = loaded.runner.ar.noise(key_of(seed), DRAWS).numpy()
        np.save(root / f"{job}.noise.npy", noise)
        spec = {
            "id": job,
            "text": text,
            "noise": str(root / f"{job}.noise.npy"),
            "cfg_value": cfg,
            "max_len": cap,
            "streaming": True,
            "decode": ["stream"],
        }
        if clone:
            spec["reference_wav"] = str(root / "voice.wav")
        if clone == "both":
            spec["prompt_wav"] = str(root / "voice.wav")
            spec["prompt_text"] = REF_TEXT
        jobs.append(spec)
    out = root / "ref"
    theirs = outputs(run_script(PYTHON, SCRIPT, setup["ckpt"], {"jobs": jobs}, out, SETUP), out)
    return ours, theirs


@pytest.mark.parametrize("job", list(JOBS))
def test_patches_and_stop_equal_the_reference(compared: tuple[dict, dict], job: str) -> None:
    ours, theirs = compared
    patches = np.stack(ours[job]).reshape(theirs[f"{job}.patches"].shape[0], -1)
    reference = theirs[f"{job}.patches"].reshape(len(patches), -1)
    assert np.abs(reference).max() > 0.1
    assert np.abs(patches - reference).max() < 1e-4
    # Same length: the same stop step, or both at the same cap.
    assert len(ours[job]) == theirs[f"{job}.steps"]


def test_the_jobs_end_both_ways(compared: tuple[dict, dict]) -> None:
    """The stop head ends some, the cap others: both paths are compared."""
    _, theirs = compared
    stops = [theirs[f"{job}.stop_step"] for job in JOBS]
    assert any(s is None for s in stops) and any(s is not None for s in stops)
    assert {theirs[f"{job}.mode"] for job in JOBS} == {"zero_shot", "reference", "ref_continuation"}


@pytest.mark.parametrize("job", list(JOBS))
def test_audio_equals_the_reference_stream(
    setup: dict, compared: tuple[dict, dict], job: str
) -> None:
    ours, theirs = compared
    vocoder = setup["loaded"].vocoder
    frames = np.stack(ours[job])
    audio, first = [], 0
    for size in (1, 2, 4, 4, 4, 4, 4):
        if first >= len(frames):
            break
        end = min(first + size, len(frames))
        left = min(first, vocoder.left_context)
        window = frames[first - left : end]
        item = DecodeItem(None, window, left, 0)
        audio.append(vocoder.decode([item])[0])
        first = end
    streamed = np.concatenate(audio)
    reference = theirs[f"{job}.audio_stream"].reshape(-1)
    assert streamed.shape == reference.shape
    assert np.abs(reference).max() > 0.05
    assert np.abs(streamed - reference).max() < 1e-4
