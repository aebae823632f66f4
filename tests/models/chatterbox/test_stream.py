"""S3Gen streamed inside a clause equals the reference's ``finalize=False`` decoding.

The engine's own ``VocoderLoop`` cuts a unit as T3 makes it (first chunk small,
chunks doubling, 3 tokens of look-ahead, the rest once the unit closes); every
chunk's audio is checked against chatterbox-tts 0.1.7 decoding the same prefix
with ``finalize=False`` (``finalize=True`` for the unit's end), HiFT resumed from
the excitation already played, each call after the unit's seed, on real-size
random S3Gen weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from models.base import DecodeItem
from models.blocks.flow import Flow
from models.blocks.hift import load_hift
from models.chatterbox.s3gen import Conditioning, S3Gen
from models.chatterbox.vocoder import ChatterboxVocoder, StreamConditioning, unit_seed
from tests.models.chatterbox.ckpt_flow import flow_tensors
from tests.models.chatterbox.ckpt_hift import mel2wav_tensors
from tests.models.chatterbox.reference import run_reference
from voiceserver.engine.frames import FrameRing
from voiceserver.engine.vocoder_loop import VocoderLoop, VocoderLoopConfig

KEY = 7
UNITS = (23, 6)
"""Tokens of each unit: a clause cut into several chunks, then a short one."""


@pytest.fixture(scope="module")
def weights() -> dict[str, torch.Tensor]:
    return flow_tensors(seed=5) | mel2wav_tensors(seed=6)


class Recording(ChatterboxVocoder):
    """The real vocoder, noting each chunk's (end, view) in its unit."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.chunks: list[tuple[int, int, int]] = []

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        for item in items:
            self.chunks.append((item.left == 0, item.left + item.chunk_frames, len(item.frames)))
        return super().decode(items)


def stream_units(vocoder: ChatterboxVocoder, voice: Conditioning, units: list[np.ndarray]):
    """Feed the units two tokens a step, as T3 would, decoding whatever the loop
    finds ready after each step; the audio each unit got."""
    ring = FrameRing(1, 4096, 1, np.int64)
    loop = VocoderLoop(vocoder, ring, 1, VocoderLoopConfig(2, 8, 4, 60.0))
    loop.open(0, StreamConditioning(voice, KEY))
    audio: list[np.ndarray] = []
    starved = np.zeros(1, bool)
    for unit in units:
        for at in range(0, len(unit), 2):
            step = unit[at : at + 2]
            closes = np.array([at + len(step) == len(unit)])
            ring.append(np.array([0]), np.array([len(step)]), step[:, None], closes)
            audio += loop.step(0.0, starved).audio
    while (decoded := loop.step(0.0, np.ones(1, bool))).audio:
        audio += decoded.audio
    return np.concatenate(audio)


def test_streamed_chunks_equal_the_reference_finalize_false(
    weights: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    save_file(weights, str(ckpt / "s3gen_meanflow.safetensors"))
    rng = np.random.default_rng(4)
    units = [rng.integers(0, 6561, n) for n in UNITS]
    prompt = rng.integers(0, 6561, 12)
    prompt_mel = rng.normal(-6, 2, (1, 2 * len(prompt), 80)).astype(np.float32)
    embedding = rng.normal(size=(1, 192)).astype(np.float32)
    np.save(tmp_path / "feat.npy", prompt_mel)
    np.save(tmp_path / "emb.npy", embedding)

    flow = Flow()
    flow.load_state_dict(
        {k[len("flow.") :]: v for k, v in weights.items() if k.startswith("flow.")}, strict=True
    )
    s3gen = S3Gen(flow, load_hift(weights))
    voice = Conditioning(
        torch.tensor(prompt[None]), torch.from_numpy(prompt_mel), torch.from_numpy(embedding)
    )
    vocoder = Recording(s3gen, torch.device("cpu"), torch.float32)
    audio = stream_units(vocoder, voice, units)
    assert len(audio) == 960 * sum(UNITS)

    # The loop cut the clause while it was being made: a first chunk of 2, the
    # look-ahead read and held back, the end decoded once the unit closed.
    per_unit: list[list[tuple[int, int]]] = []
    for starts, end, view in vocoder.chunks:
        if starts:
            per_unit.append([])
        per_unit[-1].append((end, view))
    assert per_unit[0][0] == (2, 5)
    assert len(per_unit[0]) >= 4 and per_unit[0][-1][0] == per_unit[0][-1][1] == UNITS[0]
    assert any(view - end == 3 for end, view in per_unit[0])

    keys = torch.Generator().manual_seed(KEY)
    tasks = [
        {
            "kind": "s3gen_stream",
            "id": f"u{i}",
            "tokens": unit.tolist(),
            "prompt_token": prompt.tolist(),
            "prompt_feat": str(tmp_path / "feat.npy"),
            "embedding": str(tmp_path / "emb.npy"),
            "seed": unit_seed(keys),
            "chunks": per_unit[i],
        }
        for i, unit in enumerate(units)
    ]
    ref = run_reference(ckpt, {"tasks": tasks}, tmp_path / "ref")
    expected = np.concatenate(
        [ref[f"u{i}.c{k}"] for i in range(len(units)) for k in range(len(per_unit[i]))]
    )
    assert expected.shape == audio.shape
    assert np.abs(expected[:480]).max() == 0 and np.abs(expected).max() > 0.01  # faded in
    np.testing.assert_allclose(audio, expected, atol=1e-4, rtol=0)


def test_streamed_chunks_differ_from_a_whole_clause_decode_only_by_the_prefix_calls(
    weights: dict[str, torch.Tensor],
) -> None:
    """With the look-ahead reaching the unit's end, the last chunk is the
    reference's ``finalize=True`` call, so a unit decoded in one chunk equals the
    whole-clause decoder's audio exactly."""
    flow = Flow()
    flow.load_state_dict(
        {k[len("flow.") :]: v for k, v in weights.items() if k.startswith("flow.")}, strict=True
    )
    s3gen = S3Gen(flow, load_hift(weights))
    rng = np.random.default_rng(9)
    prompt = rng.integers(0, 6561, 10)
    voice = Conditioning(
        torch.tensor(prompt[None]),
        torch.from_numpy(rng.normal(-6, 2, (1, 20, 80)).astype(np.float32)),
        torch.from_numpy(rng.normal(size=(1, 192)).astype(np.float32)),
    )
    tokens = rng.integers(0, 6561, 9)
    streamed = ChatterboxVocoder(s3gen, torch.device("cpu"), torch.float32)
    stream = streamed.new_stream(StreamConditioning(voice, KEY))
    one = streamed.decode([DecodeItem(stream, tokens, 0, 0)])[0]
    whole = ChatterboxVocoder(s3gen, torch.device("cpu"), torch.float32, stream=False)
    assert whole.whole_units and not streamed.whole_units
    assert streamed.right_context == 3 and streamed.left_context >= 1004
    stream = whole.new_stream(StreamConditioning(voice, KEY))
    # The whole-unit decoder draws from the key directly; streaming draws per unit.
    seeds = torch.Generator().manual_seed(KEY)
    stream.generator = torch.Generator().manual_seed(unit_seed(seeds))
    reference = whole.decode([DecodeItem(stream, tokens, 0, 0)])[0]
    np.testing.assert_allclose(one, reference, atol=1e-5, rtol=0)
