"""S3Gen equals the reference's on real-size random weights: the flow's mel, and the
whole utterance's audio (flow, HiFT, the fade-in), as ``S3Gen.inference`` makes it.

The reference draws its random numbers from torch's global generator (the flow's
starting noise, then HiFT's source); the same draws after the same seed are
handed to ours, which takes them as inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from models.blocks.flow import Flow
from models.blocks.hift import load_hift
from models.chatterbox.s3gen import Conditioning, S3Gen, draw_utterance_noise
from tests.models.chatterbox.ckpt_flow import flow_tensors
from tests.models.chatterbox.ckpt_hift import mel2wav_tensors
from tests.models.chatterbox.reference import run_reference

SEED = 11


@pytest.fixture(scope="module")
def weights() -> dict[str, torch.Tensor]:
    return flow_tensors(seed=5) | mel2wav_tensors(seed=6)


def test_mel_and_audio_equal_the_reference(
    weights: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    save_file(weights, str(ckpt / "s3gen_meanflow.safetensors"))
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 6561, 17).tolist()
    prompt = rng.integers(0, 6561, 12).tolist()
    prompt_mel = (rng.normal(-6, 2, (1, 2 * len(prompt), 80))).astype(np.float32)
    embedding = rng.normal(size=(1, 192)).astype(np.float32)
    np.save(tmp_path / "feat.npy", prompt_mel)
    np.save(tmp_path / "emb.npy", embedding)
    task = {
        "kind": "s3gen",
        "id": "s",
        "tokens": tokens,
        "prompt_token": prompt,
        "prompt_feat": str(tmp_path / "feat.npy"),
        "embedding": str(tmp_path / "emb.npy"),
        "seed": SEED,
    }
    ref = run_reference(ckpt, {"tasks": [task]}, tmp_path / "ref")

    flow = Flow()
    flow.load_state_dict(
        {k[len("flow.") :]: v for k, v in weights.items() if k.startswith("flow.")}, strict=True
    )
    s3gen = S3Gen(flow, load_hift(weights))
    voice = Conditioning(
        torch.tensor([prompt]), torch.from_numpy(prompt_mel), torch.from_numpy(embedding)
    )
    torch.manual_seed(SEED)
    noise = draw_utterance_noise(len(tokens), len(prompt))
    mel = flow.inference(
        torch.tensor([tokens]), voice.prompt_tokens, voice.prompt_mel, voice.embedding, noise.flow
    )
    expected = ref["s.mel"]
    assert mel.shape == expected.shape == (1, 80, 2 * len(tokens))
    assert np.isfinite(expected).all() and np.abs(expected).max() > 0.1
    np.testing.assert_allclose(mel.numpy(), expected, atol=1e-4, rtol=0)

    audio = s3gen.utterance(torch.tensor([tokens]), voice, noise)[0].numpy()
    expected = ref["s.wav"]
    assert audio.shape == expected.shape == (960 * len(tokens),)
    assert np.abs(expected[:480]).max() == 0 and np.abs(expected).max() > 0.01  # faded in
    np.testing.assert_allclose(audio, expected, atol=1e-4, rtol=0)


def test_a_batch_of_utterances_equals_each_alone(weights: dict[str, torch.Tensor]) -> None:
    """Utterances of different lengths and voices decoded in one call (the flow padded
    and batched) give each one's audio as decoding it alone does."""
    flow = Flow()
    flow.load_state_dict(
        {k[len("flow.") :]: v for k, v in weights.items() if k.startswith("flow.")}, strict=True
    )
    s3gen = S3Gen(flow, load_hift(weights))
    gen = torch.Generator().manual_seed(4)
    items = []
    for tokens, prompt in ((9, 14), (21, 6), (4, 10)):
        voice = Conditioning(
            torch.randint(0, 6561, (1, prompt), generator=gen),
            torch.randn(1, 2 * prompt, 80, generator=gen) - 6,
            torch.randn(1, 192, generator=gen),
        )
        ids = torch.randint(0, 6561, (tokens,), generator=gen)
        items.append((ids, voice, draw_utterance_noise(tokens, prompt, gen)))
    batched = s3gen.utterances(items)
    for (ids, voice, noise), audio in zip(items, batched, strict=True):
        alone = s3gen.utterance(ids[None], voice, noise)[0]
        assert audio.shape == alone.shape == (960 * len(ids),)
        assert alone.abs().max() > 0.01
        torch.testing.assert_close(audio, alone, atol=1e-5, rtol=0)
