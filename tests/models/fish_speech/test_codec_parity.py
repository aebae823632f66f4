"""S2 Pro's codec against the reference (fish-speech==0.1.0's modded DAC), and the
streaming vocoder against whole decoding.

A tiny random ``codec.pth`` in S2 Pro's on-disk form (tests/models/fish_speech/
ckpt_codec.py) is loaded by ``load_codec`` and, in .venv-ref-fish, into the
reference's own classes (tools/ref/fish_speech/ref_codec.py, strict load). Our
decode must be within 1e-4 of the reference's and our encode must give its codes;
the reference's state dict at S2 Pro's real sizes must be exactly the keys and
shapes our loader checks a checkpoint against. The vocoder, driven by the
engine's own vocoder loop over several streams at once, must land within the SNR
its policy promises (40 dB) of decoding each unit whole.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from models.blocks.dac import DAC, DACConfig, checkpoint_shapes, config_from_shapes
from models.blocks.dac_file import CODEC_FILE, CheckpointError, load_codec
from models.fish_speech.vocoder import FishVocoder
from tests.models.fish_speech.ckpt_codec import TINY, build_codec, codec_tensors, config_dict
from tests.models.fish_speech.reference import run_reference
from voiceserver.engine.frames import FrameRing
from voiceserver.engine.vocoder_loop import VocoderLoop, VocoderLoopConfig

FRAMES = 150
"""Code frames decoded: past the quantizer transformers' window of 128."""
PROMISED_SNR_DB = 40.0
"""What the vocoder's default policy promises against whole decoding."""


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    noise = float(np.sum((reference.astype(np.float64) - other) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(float(np.sum(reference**2)) / noise)


def random_codes(rng: np.random.Generator, rows: int, frames: int) -> np.ndarray:
    """int64 [rows, 10, frames], the semantic codebook first."""
    semantic = rng.integers(0, TINY.semantic_codebook_size, (rows, 1, frames))
    residual = rng.integers(0, TINY.codebook_size, (rows, TINY.residual_codebooks, frames))
    return np.concatenate([semantic, residual], axis=1)


def voice_like(rng: np.random.Generator, rows: int, samples: int) -> np.ndarray:
    """float32 [rows, samples] at 44.1 kHz: a gliding harmonic tone with noise."""
    t = np.arange(samples) / 44100.0
    out = []
    for _ in range(rows):
        f0 = rng.uniform(100, 220) * (1 + 0.2 * np.sin(2 * np.pi * rng.uniform(1, 3) * t))
        phase = 2 * np.pi * np.cumsum(f0) / 44100.0
        tone = sum(np.sin(k * phase) / k for k in range(1, 6))
        out.append(0.2 * tone + 0.02 * rng.standard_normal(samples))
    return np.stack(out).astype(np.float32)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_codec(tmp_path_factory.mktemp("fish_codec"), TINY, seed=3)


@pytest.fixture(scope="module")
def codec(ckpt: Path) -> DAC:
    torch.set_num_threads(2)
    codec = load_codec(ckpt, "cpu", torch.float32)
    # On the test machines' CPU torch now and then computes one thread's share of a
    # process's first decode off by about 2e-4 (the reference's too, never a later
    # call): a small decode and encode first (the reference runner does the same).
    codec.decode(torch.zeros(1, codec.n_codebooks, 2, dtype=torch.long))
    codec.encode(torch.zeros(1, 2048))
    return codec


@pytest.fixture(scope="module")
def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    codes = random_codes(rng, 2, FRAMES)
    # Out-of-range codes: the reference clamps each to its codebook's last entry.
    codes[0, 0, 5] = TINY.semantic_codebook_size + 7
    codes[1, 4, 9] = TINY.codebook_size + 100
    # Not a whole number of frames: both pad the last one.
    return {"codes": codes, "audio": voice_like(rng, 2, 2048 * 20 + 700)}


@pytest.fixture(scope="module")
def reference(
    ckpt: Path, inputs: dict[str, np.ndarray], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("fish_codec_ref")
    np.save(out / "codes.npy", inputs["codes"])
    np.save(out / "audio.npy", inputs["audio"])
    job = {
        "config": config_dict(TINY),
        "tasks": [
            {"kind": "decode", "id": "decode", "codes": str(out / "codes.npy")},
            {"kind": "encode", "id": "encode", "audio": str(out / "audio.npy")},
            {"kind": "keys", "id": "tiny"},
            {"kind": "keys", "id": "real", "config": config_dict(DACConfig())},
        ],
    }
    return run_reference("ref_codec.py", ckpt, job, out)


def test_decode_equals_the_reference(
    codec: DAC, inputs: dict[str, np.ndarray], reference: dict[str, Any]
) -> None:
    ref = reference["decode.audio"]
    ours = codec.decode(torch.from_numpy(inputs["codes"])).numpy()
    assert ours.dtype == np.float32 and ours.shape == ref.shape == (2, FRAMES * 2048)
    assert np.abs(ours - ref).max() < 1e-4
    # Not a degenerate run: audible, unclipped, and the rows differ.
    assert 0.05 < float(np.std(ours)) < 0.5 and np.mean(np.abs(ours) > 0.99) < 0.001
    assert np.abs(ours[0] - ours[1]).max() > 0.1


def test_encode_equals_the_reference(
    codec: DAC, inputs: dict[str, np.ndarray], reference: dict[str, Any]
) -> None:
    ref = reference["encode.codes"]
    ours = codec.encode(torch.from_numpy(inputs["audio"])).numpy()
    frames = -(-inputs["audio"].shape[1] // 2048)
    assert ours.dtype == np.int64 and ours.shape == ref.shape == (2, 10, frames)
    np.testing.assert_array_equal(ours, ref)
    assert all(len(np.unique(ours[:, i])) > 3 for i in range(10))  # codes vary


def test_checkpoint_layout_is_the_references(ckpt: Path, reference: dict[str, Any]) -> None:
    """S2 Pro's real sizes: the reference's 541 tensors are exactly the ones our loader
    holds a codec.pth to (and give back S2 Pro's config); the tiny file's tensors
    have the reference's dtypes."""
    real = {k: tuple(shape) for k, (shape, _) in reference["real.keys"].items()}
    with torch.device("meta"):
        ours = checkpoint_shapes(DAC(DACConfig()))
    assert len(real) == 541 and ours == real
    assert config_from_shapes(real) == DACConfig()
    stored = torch.load(ckpt / CODEC_FILE, weights_only=True)
    dtypes = {k: dtype for k, (_, dtype) in reference["tiny.keys"].items()}
    assert {k: str(v.dtype) for k, v in stored.items()} == dtypes


def run_loop(
    vocoder: FishVocoder, units: list[list[np.ndarray]], paces: list[int]
) -> list[np.ndarray]:
    """Every stream's audio from the engine's vocoder loop: stream ``s`` gets ``paces[s]``
    frames per step, its units closed as they end; all streams decode in shared calls."""
    streams = len(units)
    ring = FrameRing(streams, 512, 10, np.int64)
    loop = VocoderLoop(vocoder, ring, streams, VocoderLoopConfig(1, 32, 8, 1e9))
    pending = [[(u, i == len(stream) - 1) for i, u in enumerate(stream)] for stream in units]
    sent = [0] * streams
    audio: list[list[np.ndarray]] = [[] for _ in range(streams)]
    for s in range(streams):
        loop.open(s, None)
    calls = 0
    while not all(loop.drained(np.arange(streams))) or any(pending):
        for s in range(streams):
            if not pending[s]:
                continue
            unit, _ = pending[s][0]
            take = unit[sent[s] : sent[s] + paces[s]]
            sent[s] += len(take)
            closes = sent[s] == len(unit)
            ring.append(np.array([s]), np.array([len(take)]), take, np.array([closes]))
            if closes:
                pending[s].pop(0)
                sent[s] = 0
        starved = np.array([not p for p in pending])
        decoded = loop.step(float(calls), starved)
        calls += 1
        for s, pcm in zip(decoded.streams.tolist(), decoded.audio, strict=True):
            audio[s].append(pcm)
        assert calls < 500
    return [np.concatenate(a) for a in audio]


def test_streaming_matches_whole_decoding(codec: DAC) -> None:
    """Three streams through the engine's vocoder loop (first chunk 1 frame, doubling
    to 32): one long unit, another at another pace, and two units back to back
    (the second decodes as if it began the sequence, as the engine keeps the left
    context inside a unit)."""
    rng = np.random.default_rng(5)
    frames = [random_codes(rng, 1, n)[0].T for n in (200, 140, 60, 90)]
    units = [[frames[0]], [frames[1]], [frames[2], frames[3]]]
    vocoder = FishVocoder(codec, "cpu", torch.float32)
    assert vocoder.left_context == 128 and vocoder.right_context == 0
    streamed = run_loop(vocoder, units, paces=[3, 5, 4])

    def whole(unit: np.ndarray) -> np.ndarray:
        return codec.decode(torch.from_numpy(unit.T.copy())[None])[0].numpy()

    hop = codec.hop_length
    expected = [
        whole(frames[0]),
        whole(frames[1]),
        np.concatenate([whole(frames[2]), whole(frames[3])]),
    ]
    for got, want in zip(streamed, expected, strict=True):
        assert got.dtype == np.float32 and got.shape == want.shape
        assert snr_db(want, got) >= PROMISED_SNR_DB
        # Within the first 128 frames each window holds the whole past: exact.
        assert snr_db(want[: 128 * hop], got[: 128 * hop]) > 90
    # Past 128 frames the window is cut: close, not bit-exact.
    assert snr_db(expected[0][128 * hop :], streamed[0][128 * hop :]) < 200


def test_a_missing_file_or_tensor_is_named(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=re.escape(f"missing {CODEC_FILE}")):
        load_codec(tmp_path)
    state = codec_tensors(TINY, seed=1)
    gone = "decoder.model.2.block.3.block.1.conv.parametrizations.weight.original0"
    del state[gone]
    state["decoder.extra.weight"] = torch.zeros(1)
    state["quantizer.post_module.layers.1.attention.wo.weight"] = torch.zeros(3, 3)
    torch.save(state, tmp_path / CODEC_FILE)
    with pytest.raises(CheckpointError) as caught:
        load_codec(tmp_path)
    message = str(caught.value)
    assert str(tmp_path / CODEC_FILE) in message
    assert gone in message and "missing" in message
    assert "'decoder.extra.weight'" in message and "unexpected" in message
    assert "quantizer.post_module.layers.1.attention.wo.weight' is (3, 3) in the file" in message
    # A tensor the sizes are read from.
    del state["quantizer.post_module.freqs_cis"]
    torch.save(state, tmp_path / CODEC_FILE)
    with pytest.raises(CheckpointError, match=re.escape("'quantizer.post_module.freqs_cis'")):
        load_codec(tmp_path)


def test_a_training_checkpoint_loads_as_fish_speech_reads_it(tmp_path: Path) -> None:
    """Fish Speech's loader also takes ``{"state_dict": {"generator.<key>": ...}}``."""
    state = codec_tensors(TINY, seed=2)
    wrapped = {f"generator.{k}": v for k, v in state.items()}
    wrapped["discriminator.conv.weight"] = torch.zeros(1)
    torch.save({"state_dict": wrapped}, tmp_path / CODEC_FILE)
    plain = tmp_path / "plain"
    plain.mkdir()
    torch.save(state, plain / CODEC_FILE)
    codes = torch.from_numpy(random_codes(np.random.default_rng(0), 1, 8))
    a, b = load_codec(tmp_path).decode(codes), load_codec(plain).decode(codes)
    assert torch.equal(a, b)
