"""Chatterbox Turbo on CUDA gives the CPU's tokens and audio.

Runs only where a GPU is present (the lent H200); CI has none.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from models.base import LoadedModel, SynthParams
from models.chatterbox.loader import load
from tests.models.chatterbox.ckpt_full import build_checkpoint
from tests.models.drive import chunk_items, run_schedule, units_of

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TEXT = "Hello there, how are you today? A second clause follows it."


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("cbx") / "ckpt", seed=3)


def speak(model: LoadedModel, extra: dict) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each unit's tokens and its audio, decoded as the engine hands a unit over."""
    params = SynthParams(voice="default", extra=extra)
    units = units_of(model, params, model.runner.encode_text(TEXT))
    stream = model.vocoder.new_stream(model.runner.prepare(params).conditioning)
    audio = [
        np.concatenate(model.vocoder.decode(chunk_items(model, stream, u, [len(u)]))) for u in units
    ]
    return units, audio


@pytest.mark.parametrize("stream_decode", [False, True])
def test_cuda_fp32_equals_cpu(checkpoint: Path, no_tf32: None, stream_decode: bool) -> None:
    """Each decode mode the same on both devices (``auto`` streams on CUDA only, so
    the mode is set: a streamed clause is not the whole-clause decode)."""
    extra = {"temperature": 0.0, "max_new_tokens": 30, "seed": 5}
    cpu = load({"device": "cpu", "stream_decode": stream_decode}, checkpoint)
    gpu = load({"device": "cuda", "stream_decode": stream_decode}, checkpoint)
    tokens_cpu, audio_cpu = speak(cpu, extra)
    tokens_gpu, audio_gpu = speak(gpu, extra)
    assert len(tokens_cpu) == 1 and len(audio_cpu) == 1  # one utterance
    for a, b, wa, wb in zip(tokens_cpu, tokens_gpu, audio_cpu, audio_gpu, strict=True):
        np.testing.assert_array_equal(a, b)
        assert wa.shape == wb.shape == (len(a) * 960,)
        assert np.abs(wa - wb).max() < 1e-3


def test_bf16_bench_ignore_eos_runs_every_utterance_to_its_cap(checkpoint: Path) -> None:
    model = load(
        {"device": "cuda", "dtype": "bfloat16", "bench_ignore_eos": True, "max_new_tokens": 40},
        checkpoint,
    )
    tokens, audio = speak(model, {"temperature": 0.8, "seed": 1})
    for unit, wav in zip(tokens, audio, strict=True):
        # 40 tokens, then the 3 silence tokens; a sampled start id (6561) is no frame.
        assert 38 + 3 <= len(unit) <= 40 + 3 and unit.reshape(-1)[-3:].tolist() == [4299] * 3
        assert np.isfinite(wav).all() and np.abs(wav).max() > 0


def tokens_of(model: LoadedModel, extra: dict) -> dict[int, list[np.ndarray]]:
    """Three contexts of different texts admitted at steps 0, 1 and 3, stepped
    together to their ends: each one's frames per unit."""
    runner = model.runner
    texts = ["Hello there, friend.", "A second and longer sentence, spoken.", "Short."]
    joins = {
        step: (slot, SynthParams(voice="default", extra=extra), runner.encode_text(texts[slot]))
        for step, slot in ((0, 0), (1, 1), (3, 2))
    }
    return run_schedule(runner, joins)[0]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_t3_graph_replay_equals_eager(checkpoint: Path, no_tf32: None, temperature: float) -> None:
    """T3's decode step replayed from CUDA graphs gives the eager step's tokens
    exactly (fp32, TF32 off), greedy and sampled with a seed, for contexts of
    different lengths joining at different steps."""
    extra = {"temperature": temperature, "seed": 3, "max_new_tokens": 40}
    options = {"device": "cuda", "max_contexts": 6}
    graphed = load(options, checkpoint)
    eager = load({**options, "cuda_graphs": False}, checkpoint)
    assert graphed.runner.t3.steps.graphs is not None and eager.runner.t3.steps.graphs is None  # type: ignore[attr-defined]
    a, b = tokens_of(eager, extra), tokens_of(graphed, extra)
    assert sorted(a) == sorted(b) == [0, 1, 2]
    for slot in a:
        assert len(a[slot]) == len(b[slot]) == 1 and len(a[slot][0]) > 3
        np.testing.assert_array_equal(a[slot][0], b[slot][0])
