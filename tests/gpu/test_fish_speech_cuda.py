"""Fish Speech S2 Pro on CUDA gives the CPU's frames and audio; graphs give eager's.

Runs only where a GPU is present (the lent H200); CI has none.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from models.base import LoadedModel, SynthParams
from models.fish_speech.loader import load
from tests.models.drive import chunk_items, run_schedule, units_of
from tests.models.fish_speech.ckpt import build_checkpoint

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TEXTS = ["Hello there, friend.", "A second and longer sentence, spoken.", "Short."]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("fish") / "ckpt", seed=3)


def frames_of(model: LoadedModel, extra: dict) -> dict[int, list[np.ndarray]]:
    """Three contexts admitted at steps 0, 1 and 3, stepped together to their ends."""
    runner = model.runner
    joins = {
        step: (slot, SynthParams(voice="default", extra=extra), runner.encode_text(TEXTS[slot]))
        for step, slot in ((0, 0), (1, 1), (3, 2))
    }
    return run_schedule(runner, joins)[0]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_cuda_fp32_equals_cpu_and_graphs_equal_eager(
    checkpoint: Path, no_tf32: None, temperature: float
) -> None:
    extra = {"temperature": temperature, "seed": 3, "max_new_tokens": 20}
    cpu = frames_of(load({"device": "cpu"}, checkpoint), extra)
    graphed_model = load({"device": "cuda", "max_contexts": 6}, checkpoint)
    eager_model = load({"device": "cuda", "max_contexts": 6, "cuda_graphs": False}, checkpoint)
    assert graphed_model.runner.ar.steps.graphs is not None  # type: ignore[attr-defined]
    graphed, eager = frames_of(graphed_model, extra), frames_of(eager_model, extra)
    for slot in cpu:
        for a, b, c in zip(cpu[slot], eager[slot], graphed[slot], strict=True):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(b, c)


def test_bf16_audio_and_the_vocoder_on_cuda(checkpoint: Path, no_tf32: None) -> None:
    model = load(
        {"device": "cuda", "dtype": "bfloat16", "bench_ignore_eos": True, "max_new_tokens": 30},
        checkpoint,
    )
    params = SynthParams(voice="default", extra={"temperature": 0.8, "seed": 1})
    units = units_of(model, params, model.runner.encode_text(TEXTS[1]))
    assert len(units) == 1 and units[0].shape == (30, model.runner.frame_dim)
    frames = units[0]
    stream = model.vocoder.new_stream(None)
    items = chunk_items(model, stream, frames, [2, 4, 8])
    chunked = np.concatenate([model.vocoder.decode([item])[0] for item in items])
    whole_stream = model.vocoder.new_stream(None)
    whole = np.concatenate(model.vocoder.decode(chunk_items(model, whole_stream, frames, [30])))
    assert chunked.shape == whole.shape == (30 * 2048,)
    assert np.isfinite(chunked).all() and np.abs(chunked).max() > 0
    noise = np.sum((chunked - whole) ** 2) / max(np.sum(whole**2), 1e-12)
    assert 10 * np.log10(1 / max(noise, 1e-30)) > 40
