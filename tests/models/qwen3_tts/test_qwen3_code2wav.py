"""Code2Wav streaming: chunked, batched decoding equals whole-utterance decoding."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.qwen3_tts.loader import load
from tests.models.qwen3_tts.driver import decode_chunked


def test_chunked_batched_decode_equals_whole_decode(ckpt_dirs: dict[str, Path]) -> None:
    model = load({"max_contexts": 1, "kv_capacity": 64}, ckpt_dirs["voice_design"])
    rng = np.random.default_rng(0)
    codes = [rng.integers(0, 2048, (n, 16)).astype(np.int64) for n in (100, 9, 37)]
    whole = [decode_chunked(model, [c], [[len(c)]])[0] for c in codes]
    # First chunk one frame, then mixed sizes; three contexts of different lengths per call.
    chunked = decode_chunked(model, codes, [[1, 5, 2, 40, 3], [1, 1, 7], [1, 16, 4]])
    for w, c in zip(whole, chunked, strict=True):
        assert w.shape == c.shape
        assert np.abs(w - c).max() < 1e-5
        assert np.abs(w).max() > 0.01
    # Decoding is causal: a prefix decodes to a prefix of the audio.
    prefix = decode_chunked(model, [codes[0][:20]], [[20]])[0]
    assert np.abs(prefix - whole[0][: 20 * 1920]).max() < 1e-5


def test_decoder_state_is_per_stream(ckpt_dirs: dict[str, Path]) -> None:
    model = load({"max_contexts": 1, "kv_capacity": 64}, ckpt_dirs["voice_design"])
    rng = np.random.default_rng(1)
    a, b = (rng.integers(0, 2048, (12, 16)).astype(np.int64) for _ in range(2))
    together = decode_chunked(model, [a, b], [[1, 4], [2, 3]])
    alone = decode_chunked(model, [a], [[1, 4]])[0]
    assert np.abs(together[0] - alone).max() < 1e-5
    assert not np.allclose(together[0], together[1])
    assert model.vocoder.decode([]) == []
