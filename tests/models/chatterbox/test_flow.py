"""S3Gen's flow (tokens -> mel) equals the reference's, on real-size random weights.

The reference draws its starting noise from torch's global generator (the new
frames' noise, then the whole call's); the same draws after the same seed are
handed to ours, which takes noise as an input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from models.chatterbox.flow import Flow
from tests.models.chatterbox.ckpt_flow import flow_tensors
from tests.models.chatterbox.reference import run_reference

SEED = 11


@pytest.fixture(scope="module")
def weights() -> dict[str, torch.Tensor]:
    return flow_tensors(seed=5)


def test_mel_equals_the_reference(weights: dict[str, torch.Tensor], tmp_path: Path) -> None:
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
    flow.load_state_dict({k[len("flow.") :]: v for k, v in weights.items()}, strict=True)
    flow.eval()
    torch.manual_seed(SEED)
    new = torch.randn(1, 80, 2 * len(tokens))
    noise = torch.randn(1, 80, 2 * (len(tokens) + len(prompt)))
    noise[:, :, 2 * len(prompt) :] = new
    mel = flow.inference(
        torch.tensor([tokens]),
        torch.tensor([prompt]),
        torch.from_numpy(prompt_mel),
        torch.from_numpy(embedding),
        noise,
    )
    expected = ref["s.mel"]
    assert mel.shape == expected.shape == (1, 80, 2 * len(tokens))
    assert np.isfinite(expected).all() and np.abs(expected).max() > 0.1
    np.testing.assert_allclose(mel.numpy(), expected, atol=1e-4, rtol=0)
