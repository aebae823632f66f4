"""The dual AR's frames against fish-speech's DualARTransformer (0.1.0, mapped to S2 Pro).

Three contexts of different lengths share the runner's batches, joining at different
steps; one speaks two text units (its second turn continues its cache, where the
reference re-encodes the conversation), one speaks with a cloned voice's reference
frames in its system message. Greedy, and seeded sampling (the reference's own
top-p and temperature, drawn with the server's uniforms).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.base import CLONE_VOICE, SynthParams
from models.fish_speech import slots as fish_slots
from models.fish_speech.loader import load
from models.fish_speech.runner import FishVoice
from models.random_draws import key_of
from tests.models.drive import run_schedule
from tests.models.fish_speech.ckpt import build_checkpoint
from tests.models.fish_speech.reference import run_reference

MAX_FRAMES = 14
TEXTS = {
    0: ["Hello world."],
    1: ["The quick brown fox jumps over the lazy dog, today.", "How are you?"],
    2: ["Numbers 0123 ok!"],
}
REF_TEXT = "How are you today?"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("fish") / "ckpt", seed=3)


@pytest.fixture(scope="module")
def model(checkpoint: Path):  # noqa: ANN201
    return load({"max_new_tokens": MAX_FRAMES}, checkpoint)


def _ref_codes(n: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    codes = rng.integers(0, 64, size=(9, n))
    codes[:, 0] = rng.integers(0, 128, size=9)
    return codes


@pytest.mark.parametrize("mode", ["greedy", "seeded"])
def test_frames_equal_the_reference(model, checkpoint: Path, tmp_path: Path, mode: str) -> None:
    runner = model.runner
    n = runner.frame_dim
    ref = _ref_codes(n)
    greedy = mode == "greedy"
    sampling = {"temperature": 0.0} if greedy else {"temperature": 0.8, "top_p": 0.8, "top_k": 0}
    seeds = {0: 11, 1: 22, 2: 33}
    params = {}
    for slot in TEXTS:
        extra = {**sampling, "seed": seeds[slot]}
        if slot == 2:
            extra["voice_prompt"] = FishVoice(REF_TEXT, ref)
        params[slot] = SynthParams(voice=CLONE_VOICE if slot == 2 else "default", extra=extra)
    joins = {
        step: (slot, params[slot], [u for t in TEXTS[slot] for u in runner.encode_text(t)])
        for step, slot in ((0, 0), (2, 1), (5, 2))
    }
    units, _ = run_schedule(runner, joins)

    np.save(tmp_path / "ref.npy", ref)
    jobs = [
        {
            "id": f"c{slot}",
            "texts": TEXTS[slot],
            "greedy": greedy,
            "temperature": 0.8,
            "top_p": 0.8,
            "key": key_of(seeds[slot]),
            "max_frames": MAX_FRAMES,
            **({"ref_text": REF_TEXT, "ref_codes": str(tmp_path / "ref.npy")} if slot == 2 else {}),
        }
        for slot in TEXTS
    ]
    spec = {
        "residual": 64,
        "ras_xor": fish_slots._RAS_KEY,
        "fast_xor": fish_slots._FAST_KEY,
        "jobs": jobs,
    }
    found = run_reference("ref_dual_ar.py", checkpoint, spec, tmp_path / "out")
    semantic = runner.ar.semantic
    for slot in TEXTS:
        frames, turns = found[f"c{slot}.frames"], found[f"c{slot}.turns"]
        assert len(turns) == len(TEXTS[slot]) == len(units[slot])
        start = 0
        for made, count in zip(units[slot], turns, strict=True):
            theirs = frames[start : start + count]
            start += count
            theirs = theirs[theirs[:, 0] < semantic, 1:]
            assert made.reshape(-1, n).tolist() == theirs.tolist(), f"context {slot}"
        assert sum(len(u) for u in units[slot]) > 0
