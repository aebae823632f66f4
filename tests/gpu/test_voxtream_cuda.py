"""VoXtream2 on CUDA gives the CPU's frames and audio; graphs give eager's; the real size
runs in bfloat16.

Runs only where a GPU is present (the lent H200); CI has none.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from models.base import DecodeItem, LoadedModel, SynthParams
from models.voxtream.loader import load
from tests.models.drive import run_schedule
from tests.models.voxtream.ckpt import build

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TEXTS = [
    "Hello there, friend, how are you doing today?",
    "A second and much longer sentence, spoken word by word as it streams in.",
    "Short one.",
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("voxtream") / "ckpt", seed=3)


def frames_of(model: LoadedModel, extra: dict) -> dict[int, np.ndarray]:
    """Three contexts admitted at steps 0, 1 and 3, stepped together to their ends."""
    runner = model.runner
    joins = {
        step: (slot, SynthParams(voice="default", extra=extra), runner.encode_text(TEXTS[slot]))
        for step, slot in ((0, 0), (1, 1), (3, 2))
    }
    units = run_schedule(runner, joins)[0]
    return {slot: np.concatenate(u) for slot, u in units.items()}


@pytest.mark.parametrize("extra", [{"top_k": 1, "top_p": 0.0}, {"seed": 5}])
def test_cuda_fp32_equals_cpu_and_graphs_equal_eager(
    checkpoint: Path, no_tf32: None, extra: dict
) -> None:
    cpu = frames_of(load({"device": "cpu"}, checkpoint), extra)
    graphed = load({"device": "cuda", "max_contexts": 6}, checkpoint)
    eager = load({"device": "cuda", "max_contexts": 6, "cuda_graphs": False}, checkpoint)
    assert graphed.runner.ar.steps.graphs is not None  # type: ignore[attr-defined]
    on_graphs, on_eager = frames_of(graphed, extra), frames_of(eager, extra)
    for slot in cpu:
        assert len(cpu[slot]) > 16
        assert np.array_equal(on_graphs[slot], on_eager[slot])
        assert np.array_equal(on_graphs[slot], cpu[slot])
    # Mimi on CUDA (graphed) decodes what the CPU decodes.
    frames = cpu[1].reshape(-1, 16)
    voc_cpu, voc_cuda = load({}, checkpoint).vocoder, graphed.vocoder
    waves = []
    for voc in (voc_cpu, voc_cuda):
        stream = voc.new_stream()
        parts = [
            voc.decode([DecodeItem(stream, frames[a : a + n])])[0]
            for a, n in ((0, 1), (1, 2), (3, 8))
        ]
        waves.append(np.concatenate(parts))
    assert np.abs(waves[0] - waves[1]).max() < 1e-4


def test_real_size_bfloat16_speaks(tmp_path: Path) -> None:
    """Published sizes, random weights, bfloat16 with graphs: every context speaks to its
    end, the audio is finite."""
    root = build(tmp_path / "real", seed=1, real=True)
    model = load({"device": "cuda", "dtype": "bfloat16", "max_contexts": 8}, root)
    joins = {
        step: (
            slot,
            SynthParams(voice="default", extra={"seed": slot}),
            model.runner.encode_text(t),
        )
        for step, (slot, t) in enumerate(enumerate(TEXTS))
    }
    units = run_schedule(model.runner, joins)[0]
    for slot in range(len(TEXTS)):
        frames = np.concatenate(units[slot]).reshape(-1, 16)
        assert len(frames) > 4
        stream = model.vocoder.new_stream()
        wave = model.vocoder.decode([DecodeItem(stream, frames)])[0]
        assert np.isfinite(wave).all() and np.abs(wave).max() > 0
