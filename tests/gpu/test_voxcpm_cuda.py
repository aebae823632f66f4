"""VoxCPM2 on CUDA gives the CPU's patches and audio; graphs give eager's; the real size
runs in bfloat16.

Runs only where a GPU is present (the lent H200); CI has none.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from models.base import DecodeItem, LoadedModel, SynthParams
from models.voxcpm.loader import load
from tests.models.drive import run_schedule
from tests.models.voxcpm.ckpt import build

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TEXTS = [
    "Hello there, friend, how are you doing today?",
    "A second and much longer sentence. And then another one, to make two turns.",
    "Short one.",
]
EXTRA = {"seed": 5, "max_new_tokens": 10}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("voxcpm") / "ckpt", seed=3)


def patches_of(model: LoadedModel, extra: dict) -> dict[int, np.ndarray]:
    """Three contexts admitted at steps 0, 1 and 3 (the second with two units), stepped
    together to their ends: each one's patches [N, patch x feat_dim]."""
    runner = model.runner
    units = {0: [TEXTS[0]], 1: TEXTS[1].split(". "), 2: [TEXTS[2]]}
    joins = {
        step: (
            slot,
            SynthParams(voice="default", extra=extra),
            [u for text in units[slot] for u in runner.encode_text(text)],
        )
        for step, slot in ((0, 0), (1, 1), (3, 2))
    }
    made = run_schedule(runner, joins)[0]
    width = runner.frame_dim  # type: ignore[attr-defined]
    return {slot: np.concatenate(u).reshape(-1, width) for slot, u in made.items()}


def test_cuda_fp32_equals_cpu_and_graphs_equal_eager(checkpoint: Path, no_tf32: None) -> None:
    cpu = patches_of(load({"device": "cpu"}, checkpoint), EXTRA)
    graphed = load({"device": "cuda", "max_contexts": 6}, checkpoint)
    eager = load({"device": "cuda", "max_contexts": 6, "cuda_graphs": False}, checkpoint)
    assert graphed.runner.ar.stepper.graphs is not None  # type: ignore[attr-defined]
    on_graphs, on_eager = patches_of(graphed, EXTRA), patches_of(eager, EXTRA)
    for slot in cpu:
        assert len(cpu[slot]) >= 4
        assert on_graphs[slot].shape == on_eager[slot].shape == cpu[slot].shape
        assert np.abs(on_graphs[slot] - on_eager[slot]).max() < 1e-4
        assert np.abs(on_graphs[slot] - cpu[slot]).max() < 1e-3
    # The AudioVAE on CUDA decodes what the CPU decodes, chunk by chunk.
    frames = cpu[1]
    waves = []
    for vocoder in (load({}, checkpoint).vocoder, graphed.vocoder):
        left = vocoder.left_context
        parts = []
        for a, n in ((0, 1), (1, 2), (3, len(frames) - 3)):
            start = max(0, a - left)
            parts.append(vocoder.decode([DecodeItem(None, frames[start : a + n], a - start)])[0])
        waves.append(np.concatenate(parts))
    assert np.abs(waves[0] - waves[1]).max() < 1e-4


def test_real_size_bfloat16_speaks(tmp_path: Path) -> None:
    """Published sizes, random weights, bfloat16 with graphs: every context speaks to its
    cap, the audio is finite."""
    root = build(tmp_path / "real", seed=1, real=True)
    model = load(
        {"device": "cuda", "dtype": "bfloat16", "max_contexts": 8, "bench_ignore_eos": True},
        root,
    )
    joins = {
        step: (
            slot,
            SynthParams(voice="default", extra={"seed": slot, "max_new_tokens": 6}),
            model.runner.encode_text(t),
        )
        for step, (slot, t) in enumerate(enumerate(TEXTS))
    }
    units = run_schedule(model.runner, joins)[0]
    width = model.runner.frame_dim  # type: ignore[attr-defined]
    for slot in range(len(TEXTS)):
        frames = np.concatenate(units[slot]).reshape(-1, width)
        assert len(frames) == 6
        assert np.isfinite(frames).all()
        wave = model.vocoder.decode([DecodeItem(None, frames)])[0]
        assert np.isfinite(wave).all() and np.abs(wave).max() > 0
