"""The S3 speech tokenizer equals the reference's (``S3Tokenizer.forward`` of
chatterbox-tts 0.1.7) on real-size random weights, float32: the same tokens, padded
positions included, and the same lengths, for single clips, batches of different
lengths, ``max_len`` cuts and a clip over 30 s (the windowed path); FSQ's
projections (before tanh and rounding) agree within 1e-4. The mel filterbank we
compute equals the one librosa gives the reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from models.chatterbox.s3_tokenizer import (
    CODES,
    PREFIX,
    S3Tokenizer,
    load_s3_tokenizer,
    mel_filters,
)
from tests.models.chatterbox.ckpt_s3tok import add_tokenizer_tensors
from tests.models.chatterbox.reference import REPO, run_reference

RUNNER = REPO / "tools" / "ref" / "chatterbox" / "ref_tokenizer.py"
SR = 16_000

CLIPS = {
    "s1": 1.2,
    "s4": 4.0 + 77 / SR,
    "s15": 15.0,
    "s2": 2.5 + 333 / SR,
    "s3": 3.0,
    "s35": 35.0 + 1000 / SR,
}
CASES: dict[str, tuple[list[str], int | None]] = {
    "short": (["s1"], None),
    "mid": (["s4"], None),
    "long": (["s15"], None),
    "prompt": (["s15"], 150),  # T3's prompt: the first 15 s, at most max_len tokens
    "batch": (["s4", "s1", "s2"], None),
    "batch_cut": (["s4", "s1", "s2"], 50),
    "windowed": (["s3", "s35"], None),  # a clip over 30 s: the windowed path
}


def speechlike(seconds: float, seed: int) -> np.ndarray:
    """Voiced harmonics on a wandering pitch under a syllable-rate envelope, with
    noise bursts and pauses: a log mel that changes from frame to frame."""
    rng = np.random.default_rng(seed)
    n = round(seconds * SR)
    t = np.arange(n) / SR
    f0 = 110 + 40 * np.sin(2 * np.pi * 0.6 * t + rng.uniform(0, 6)) + 15 * np.sin(7.0 * t)
    phase = 2 * np.pi * np.cumsum(f0) / SR
    voiced = sum(np.sin(h * phase + rng.uniform(0, 6)) / h for h in range(1, 25))
    syllables = np.clip(np.sin(2 * np.pi * 3.7 * t + rng.uniform(0, 6)), 0, None) ** 2
    pauses = np.repeat(rng.random(n // 4000 + 1) > 0.2, 4000)[:n]
    bursts = np.repeat(rng.random(n // 800 + 1) > 0.7, 800)[:n]
    wav = 0.3 * syllables * pauses * voiced + 0.05 * bursts * rng.normal(size=n)
    return (wav + 1e-3 * rng.normal(size=n)).astype(np.float32)


def run_ref_tokenizer(checkpoint: Path, job: dict[str, Any], out: Path) -> dict[str, Any]:
    return run_reference(checkpoint, job, out, RUNNER)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("s3tok")
    ckpt = root / "ckpt"
    ckpt.mkdir()
    add_tokenizer_tensors(ckpt, seed=7)
    paths = {}
    for i, (name, seconds) in enumerate(CLIPS.items()):
        paths[name] = root / f"{name}.npy"
        np.save(paths[name], speechlike(seconds, seed=100 + i))
    tasks: list[dict[str, Any]] = [{"kind": "buffers", "id": "buffers"}]
    for case, (clips, max_len) in CASES.items():
        wavs = [str(paths[c]) for c in clips]
        tasks.append({"kind": "tokens", "id": case, "wavs": wavs, "max_len": max_len, "dump": True})
    ref = run_ref_tokenizer(ckpt, {"tasks": tasks}, root / "ref")
    state = load_file(str(ckpt / "s3gen_meanflow.safetensors"))
    model = load_s3_tokenizer(state, "cpu", torch.float32)
    return {"ref": ref, "model": model, "paths": paths, "state": state}


def test_mel_filters_and_window_equal_the_reference(setup: dict[str, Any]) -> None:
    ref = setup["ref"]
    assert np.array_equal(mel_filters().numpy(), ref["buffers.mel_filters"])
    assert np.array_equal(torch.hann_window(400).numpy(), ref["buffers.window"])


@pytest.mark.parametrize("case", list(CASES))
def test_tokens_equal_the_reference(setup: dict[str, Any], case: str) -> None:
    ref, model = setup["ref"], setup["model"]
    clips, max_len = CASES[case]
    wavs = [np.load(setup["paths"][c]) for c in clips]
    tokens, lengths = model(wavs, max_len=max_len)
    expected, expected_lengths = ref[f"{case}.tokens"], ref[f"{case}.lengths"]

    assert tokens.dtype == lengths.dtype == torch.int64
    assert lengths.tolist() == expected_lengths.tolist()
    for row, clip in enumerate(clips):
        frames = round(CLIPS[clip] * SR) // 160
        count = (frames + 3) // 4  # 4 mel frames a token, rounded up
        assert expected_lengths[row] == (count if max_len is None else min(count, max_len))
        valid = expected[row, : expected_lengths[row]]
        assert len(np.unique(valid)) > valid.size // 4  # random weights still tokenize
        assert valid.min() >= 0 and valid.max() < CODES
    assert tokens.shape == expected.shape
    assert (tokens.numpy() != expected).sum() == 0

    if case != "windowed":  # one encoder call over the batch: compare what led there
        mel, frame_counts = model.mels(wavs, max_len)
        np.testing.assert_allclose(mel.numpy(), ref[f"{case}.mel"], atol=1e-5, rtol=0)
        projected, _ = model.project(mel, frame_counts)
        np.testing.assert_allclose(projected.numpy(), ref[f"{case}.projected"], atol=1e-4, rtol=0)


def test_digits_vary(setup: dict[str, Any]) -> None:
    """FSQ's digits change from token to token: the random projection straddles the
    rounding thresholds (the encoder's output has a fixed offset per channel, so one
    digit of this seed leans to one side)."""
    tokens = setup["ref"]["long.tokens"][0]
    digits = (tokens[:, None] // 3 ** np.arange(8)) % 3
    values = [len(np.unique(digits[:, i])) for i in range(8)]
    assert min(values) >= 2 and values.count(3) >= 7
    assert np.bincount(tokens).max() < 0.05 * tokens.size


def test_loader_names_missing_keys(setup: dict[str, Any]) -> None:
    state = dict(setup["state"])
    del state[PREFIX + "encoder.blocks.3.attn.fsmn_block.weight"]
    state[PREFIX + "encoder.extra"] = torch.zeros(1)
    with pytest.raises(ValueError, match=r"blocks\.3\.attn\.fsmn_block\.weight.*encoder\.extra"):
        load_s3_tokenizer(state)


def test_buffers_are_computed_when_absent(setup: dict[str, Any]) -> None:
    state = {
        k: v
        for k, v in setup["state"].items()
        if k not in (PREFIX + "_mel_filters", PREFIX + "window")
    }
    model = load_s3_tokenizer(state)
    assert torch.equal(model._mel_filters, S3Tokenizer()._mel_filters)
    assert torch.equal(model._mel_filters, setup["state"][PREFIX + "_mel_filters"])
    assert torch.equal(model.window, setup["state"][PREFIX + "window"])
