"""Mimi against the reference: moshi==0.2.13's own ``MimiModel``, as VoXtream loads it.

A tiny random Mimi file in Kyutai's on-disk layout (tests/models/voxtream/
ckpt_mimi.py) is loaded by ``load_mimi`` and, in .venv-ref-voxtream, by moshi's
``get_mimi`` (a strict load: the layout is moshi's). Our whole-sequence decode must
be within 1e-4 of moshi's (measured: equal); our streamed decode with
``window="moshi"``, whatever the chunking, within 1e-4 of moshi's streaming one frame
a call as VoXtream's generator decodes (measured 4.2e-7); with ``window="exact"``,
whatever the chunking, within 1e-4 of moshi's whole decode (measured 4.5e-7); and our
encode must give moshi's codes. 130 frames (10.4 s) take both transformers past their 250-step
context, where moshi's streaming and whole decoding part ways (and where the
encoder's window shows in the codes). Moshi's state dict at
the published sizes must be exactly the tensors our loader holds a file to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from models.blocks.mimi import (
    Mimi,
    MimiConfig,
    canonical_keys,
    checkpoint_shapes,
    config_from_shapes,
    load_mimi,
)
from models.blocks.mimi_stream import MimiStreams
from tests.models.reference_env import outputs, run_script
from tests.models.voxtream.ckpt_mimi import TINY, build_mimi, moshi_config

REPO = Path(__file__).resolve().parents[3]
REF_PYTHON = REPO / ".venv-ref-voxtream" / "bin" / "python"
SCRIPT = REPO / "tools" / "ref" / "voxtream" / "ref_mimi.py"
FRAMES = 130
HOP = 1920
TOLERANCE = 1e-4
GROWING = [1, 2, 4, 8, 16, 32, 64, 3]
"""Chunks (frames per call) that double, as the engine's vocoder loop sends them."""


def voice_like(rng: np.random.Generator, rows: int, samples: int) -> np.ndarray:
    """float32 [rows, samples] at 24 kHz: a gliding harmonic tone with noise."""
    t = np.arange(samples) / 24000.0
    out = []
    for _ in range(rows):
        f0 = rng.uniform(100, 220) * (1 + 0.2 * np.sin(2 * np.pi * rng.uniform(1, 3) * t))
        phase = 2 * np.pi * np.cumsum(f0) / 24000.0
        tone = sum(np.sin(k * phase) / k for k in range(1, 6))
        out.append(0.2 * tone + 0.02 * rng.standard_normal(samples))
    return np.stack(out).astype(np.float32)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_mimi(tmp_path_factory.mktemp("mimi_parity"), TINY, seed=7)


@pytest.fixture(scope="module")
def mimi(ckpt: Path) -> Mimi:
    torch.set_num_threads(2)
    return load_mimi(ckpt, 16)


@pytest.fixture(scope="module")
def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(13)
    # Not a whole number of frames: both pad the audio to whole frames.
    return {
        "codes": rng.integers(0, 2048, (2, 16, FRAMES)),
        "audio": voice_like(rng, 2, FRAMES * HOP - 700),
    }


@pytest.fixture(scope="module")
def reference(
    ckpt: Path, inputs: dict[str, np.ndarray], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("mimi_ref")
    np.save(out / "codes.npy", inputs["codes"])
    np.save(out / "audio.npy", inputs["audio"])
    codes = str(out / "codes.npy")
    job = {
        "mimi_config": moshi_config(TINY),
        "num_codebooks": 16,
        "tasks": [
            {"kind": "decode", "id": "whole", "codes": codes},
            {"kind": "stream", "id": "frames", "codes": codes, "chunks": [1] * FRAMES},
            {"kind": "encode", "id": "encode", "audio": str(out / "audio.npy")},
            {"kind": "keys", "id": "real"},
        ],
    }
    report = run_script(REF_PYTHON, SCRIPT, ckpt, job, out, "tools/ref/voxtream/make_venv.sh")
    return outputs(report, out)


def stream(mimi: Mimi, codes: np.ndarray, chunks: list[int], window: str) -> np.ndarray:
    """Every row of ``codes`` [B, 16, T] streamed through one pool, ``chunks`` frames a
    call, all rows in each call."""
    pool = MimiStreams(mimi, len(codes), window=window)
    rows = list(range(len(codes)))
    pieces, start = [], 0
    for n in chunks:
        audio, _ = pool.decode([c[:, start : start + n].T for c in codes], rows)
        pieces.append(audio.numpy())
        start += n
    return np.concatenate(pieces, axis=1)


def test_decode_equals_the_reference(
    mimi: Mimi, inputs: dict[str, np.ndarray], reference: dict[str, Any]
) -> None:
    ref = reference["whole.audio"]
    ours = mimi.decode(torch.from_numpy(inputs["codes"]))[:, 0].numpy()
    assert ours.dtype == np.float32 and ours.shape == ref.shape == (2, FRAMES * HOP)
    assert np.abs(ours - ref).max() < TOLERANCE
    # Not a degenerate run: audible, and the rows differ.
    assert 0.05 < float(np.std(ours)) < 0.5
    assert np.abs(ours[0] - ours[1]).max() > 0.1


@pytest.mark.parametrize("chunks", [[1] * FRAMES, GROWING, [128, 2]])
def test_moshi_window_streaming_equals_the_references_streaming(
    mimi: Mimi, inputs: dict[str, np.ndarray], reference: dict[str, Any], chunks: list[int]
) -> None:
    """``window="moshi"``, whatever our chunking, gives what moshi's streaming gives one
    frame a call (VoXtream's generator's way)."""
    ref = reference["frames.audio"]
    ours = stream(mimi, inputs["codes"], chunks, "moshi")
    assert ours.shape == ref.shape == (2, FRAMES * HOP)
    assert np.abs(ours - ref).max() < TOLERANCE


def test_the_references_streaming_leaves_whole_decoding_past_its_context(
    reference: dict[str, Any],
) -> None:
    """Why there are two windows: moshi's one-frame-a-call streaming equals its whole
    decode for 125 frames (250 transformer steps), then does not (by 3.8e-4 within 5
    frames here)."""
    whole, frames = reference["whole.audio"], reference["frames.audio"]
    cut = 125 * HOP
    assert np.abs(whole[:, :cut] - frames[:, :cut]).max() < TOLERANCE
    assert np.abs(whole[:, cut:] - frames[:, cut:]).max() > TOLERANCE


@pytest.mark.parametrize(
    "chunks",
    # Doubling, steady; a first chunk longer than the keys kept. (Calls of one frame:
    # tests/models/voxtream/test_mimi_streaming.py, against whole decoding.)
    [GROWING, [7] * 18 + [4], [128, 2]],
)
def test_exact_streaming_equals_the_references_whole_decode(
    mimi: Mimi, inputs: dict[str, np.ndarray], reference: dict[str, Any], chunks: list[int]
) -> None:
    assert sum(chunks) == FRAMES
    ours = stream(mimi, inputs["codes"], chunks, "exact")
    assert np.abs(ours - reference["whole.audio"]).max() < TOLERANCE


def test_encode_equals_the_reference(
    mimi: Mimi, inputs: dict[str, np.ndarray], reference: dict[str, Any]
) -> None:
    ref = reference["encode.codes"]
    ours = mimi.encode(torch.from_numpy(inputs["audio"])).numpy()
    assert ours.dtype == np.int64 and ours.shape == ref.shape == (2, 16, FRAMES)
    np.testing.assert_array_equal(ours, ref)
    assert all(len(np.unique(ours[:, i])) > 3 for i in range(16))  # codes vary


def test_checkpoint_layout_is_moshis(reference: dict[str, Any]) -> None:
    """The published sizes: moshi's 318 tensors (its attention names mapped to the
    published file's) are exactly the ones our loader holds a file to, and give back
    the published config."""
    real = {k: tuple(shape) for k, (shape, _) in reference["real.keys"].items()}
    published = canonical_keys(real)
    assert len(published) == 318
    assert checkpoint_shapes(MimiConfig()) == published
    assert config_from_shapes(published) == MimiConfig()
