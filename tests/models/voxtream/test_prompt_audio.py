"""A voice prompt's audio equals what VoXtream's own ``prepare_prompt`` (voxtream
0.2.5, run in .venv-ref-voxtream) hands its Mimi encoder (24 kHz) and its speaker
encoder (16 kHz), within 1e-6, from WAV files at 44.1, 48, 22.05, 16 and 24 kHz, mono
and stereo, with and without loudness normalisation (-23 LUFS, the peak brought back
to 1 where the gain overshoots), a clip of exactly 1 s and one of 25 s (cut to 20 s);
the embedding is normalised as the reference normalises it; a clip under 1 s is
refused where the reference refuses it. Our resampler equals torchaudio's
``Resample`` to 24 and 16 kHz from each of those rates. Bad input (silence, bytes that
are not audio, samples without a rate, non-finite samples, hours of audio) gets an
error naming ``ref_audio``."""

from __future__ import annotations

import base64
import io
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from models.base import ModelInputError
from models.resample import resample
from models.voxtream.prompt_audio import (
    LOUDNESS_LUFS,
    MAX_SECONDS,
    PromptAudio,
    load_prompt_audio,
    prepare_prompt_audio,
)
from models.voxtream.speaker import normalize_embedding
from tests.models.chatterbox.ckpt_campplus import speechlike
from tests.models.reference_env import outputs, run_script

REPO = Path(__file__).resolve().parents[3]
REF_PYTHON = REPO / ".venv-ref-voxtream" / "bin" / "python"
RUNNER = REPO / "tools" / "ref" / "voxtream" / "ref_speaker.py"
SETUP = "tools/ref/voxtream/make_venv.sh"

CLIPS = {
    "s44": (44_100, 2, 2.3),
    "m48": (48_000, 1, 1.7),
    "m22": (22_050, 1, 3.1),
    "m16": (16_000, 1, 2.0),
    "s24": (24_000, 2, 1.5),
    "one16": (16_000, 1, 1.0),
    "long16": (16_000, 1, 25.0),
    "spiky44": (44_100, 1, 2.0),
    "short22": (22_050, 1, 0.8),
}
"""WAV files: (rate, channels, seconds). ``spiky44`` is quiet but for short loud
bursts: -23 LUFS takes its peak past 1."""
RESAMPLE_FROM = (44_100, 48_000, 22_050, 16_000)


def clip(name: str) -> np.ndarray:
    """[samples, channels] float in [-1, 1]."""
    rate, channels, seconds = CLIPS[name]
    seed = sum(map(ord, name))
    if name == "spiky44":  # 3 ms bursts of 1 kHz every half second, over faint noise
        rng = np.random.default_rng(seed)
        wav = 0.001 * rng.normal(size=round(seconds * rate))
        burst = 0.9 * np.sin(2 * np.pi * 1000 * np.arange(round(0.003 * rate)) / rate)
        for start in range(rate // 10, wav.size - burst.size, rate // 2):
            wav[start : start + burst.size] += burst
        return wav[:, None]
    parts = [speechlike(seconds, seed + c, rate) for c in range(channels)]
    return np.stack(parts, axis=1)


def wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    """A 16-bit PCM WAV file of [samples, channels]."""
    pcm = np.clip(np.round(samples * 32767.0), -32768, 32767).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(samples.shape[1])
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm.tobytes())
    return buffer.getvalue()


def stand_in_speaker(wav16: np.ndarray) -> torch.Tensor:
    """The reference script's stand-in encoder: mean magnitude of 192 equal slices."""
    usable = wav16.size // 192 * 192
    return torch.from_numpy(np.abs(wav16[:usable]).reshape(192, -1).mean(axis=1))[None]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("prompt_audio")
    files: dict[str, bytes] = {}
    tasks: list[dict[str, Any]] = []
    for name, (rate, _, _) in CLIPS.items():
        files[name] = wav_bytes(clip(name), rate)
        path = root / f"{name}.wav"
        path.write_bytes(files[name])
        for normalize in (False, True):
            tasks.append(
                {"kind": "prompt", "id": f"{name}-{normalize}", "wav_file": str(path),
                 "normalize": normalize}
            )  # fmt: skip
    mono: dict[int, np.ndarray] = {}
    for rate in RESAMPLE_FROM:
        mono[rate] = speechlike(1.3, rate // 7, rate)
        path = root / f"r{rate}.npy"
        np.save(path, mono[rate])
        for new in (24_000, 16_000):
            tasks.append(
                {"kind": "resample", "id": f"r{rate}-{new}", "wav": str(path),
                 "orig_sr": rate, "new_sr": new}
            )  # fmt: skip
    report = run_script(REF_PYTHON, RUNNER, root, {"tasks": tasks}, root / "ref", SETUP)
    return {"ref": outputs(report, root / "ref"), "files": files, "mono": mono}


def test_the_oracle_is_real_torchaudio(setup: dict[str, Any]) -> None:
    assert setup["ref"]["torchaudio"].startswith("2.11.1")


ACCEPTED = [name for name in CLIPS if name != "short22"]


@pytest.mark.parametrize("normalize", [False, True], ids=["as-is", "loudness"])
@pytest.mark.parametrize("name", ACCEPTED)
def test_prompt_audio_equals_what_prepare_prompt_encodes(
    setup: dict[str, Any], name: str, normalize: bool
) -> None:
    ref = setup["ref"]
    key = f"{name}-{normalize}"
    ours = load_prompt_audio(setup["files"][name], normalize_loudness=normalize)
    assert isinstance(ours, PromptAudio)
    for part in ("mimi", "speaker"):
        expected, got = ref[f"{key}.{part}"], getattr(ours, part)
        assert got.dtype == np.float32 and got.shape == expected.shape
        assert np.abs(expected).max() > 0.01
        assert np.abs(got - expected).max() <= 1e-6, part
    rate, _, seconds = CLIPS[name]
    assert ours.seconds == pytest.approx(min(seconds, MAX_SECONDS), abs=1 / rate)
    assert ours.speaker.size == -(-round(ours.seconds * rate) * 16_000 // rate)


@pytest.mark.parametrize("name", ["s44", "m22", "spiky44"])
def test_loudness_normalisation_changes_the_clip_as_the_reference_does(
    setup: dict[str, Any], name: str
) -> None:
    ref = setup["ref"]
    plain, loud = ref[f"{name}-False.mimi"], ref[f"{name}-True.mimi"]
    assert np.abs(plain - loud).max() > 0.01  # it did something
    if name == "spiky44":  # the gain overshot: the peak was brought back to 1
        assert 0.9 < np.abs(loud).max() < 1.1


@pytest.mark.parametrize("name", ["s44", "m16", "long16"])
def test_the_embedding_is_normalised_as_the_reference_does(
    setup: dict[str, Any], name: str
) -> None:
    expected = setup["ref"][f"{name}-True.embedding"]
    ours = load_prompt_audio(setup["files"][name], normalize_loudness=True)
    embedding = normalize_embedding(stand_in_speaker(ours.speaker))[0].numpy()
    assert abs(float(np.linalg.norm(expected)) - 1.0) < 1e-6
    np.testing.assert_allclose(embedding, expected, atol=1e-6, rtol=0)


def test_a_clip_under_one_second_is_refused_as_the_reference_refuses(
    setup: dict[str, Any],
) -> None:
    for normalize in (False, True):
        assert "too short" in setup["ref"][f"short22-{normalize}.error"]
        with pytest.raises(ModelInputError, match=r"too short \(0\.80 s\).*at least 1 s") as err:
            load_prompt_audio(setup["files"]["short22"], normalize_loudness=normalize)
        assert err.value.param == "ref_audio"


@pytest.mark.parametrize("new", [24_000, 16_000])
@pytest.mark.parametrize("rate", RESAMPLE_FROM)
def test_resampling_equals_torchaudio(setup: dict[str, Any], rate: int, new: int) -> None:
    wav, expected = setup["mono"][rate], setup["ref"][f"r{rate}-{new}.wav"]
    ours = resample(wav, rate, new)
    assert ours.shape == expected.shape == (-(-wav.size * new // rate),)
    assert np.abs(ours - expected).max() <= 1e-6


def test_base64_and_samples_give_the_same_prompt(setup: dict[str, Any]) -> None:
    data = setup["files"]["m22"]
    from_bytes = load_prompt_audio(data, normalize_loudness=True)
    from_base64 = load_prompt_audio(base64.b64encode(data).decode(), normalize_loudness=True)
    pcm = np.frombuffer(data[44:], dtype="<i2").astype(np.float32) / 32768.0
    from_samples = load_prompt_audio(pcm.tolist(), 22_050, normalize_loudness=True)
    for other in (from_base64, from_samples):
        assert np.array_equal(other.mimi, from_bytes.mimi)
        assert np.array_equal(other.speaker, from_bytes.speaker)


# -- bad input ---------------------------------------------------------------------


def test_silence_is_refused() -> None:
    silent = wav_bytes(np.zeros((24_000, 1)), 24_000)
    with pytest.raises(ModelInputError, match="ref_audio: the clip is silent") as err:
        load_prompt_audio(silent, normalize_loudness=True)
    assert err.value.param == "ref_audio"
    with pytest.raises(ModelInputError, match="silent"):
        prepare_prompt_audio(np.full(16_000, 1e-6, np.float32), 16_000, normalize_loudness=False)


def test_bytes_that_are_not_audio_are_refused() -> None:
    with pytest.raises(ModelInputError, match="ref_audio: not decodable audio") as err:
        load_prompt_audio(b"%PDF-1.7 this is not audio" * 50, normalize_loudness=True)
    assert err.value.param == "ref_audio"
    with pytest.raises(ModelInputError, match="ref_audio: a string must be base64"):
        load_prompt_audio("not base64 at all!", normalize_loudness=True)
    with pytest.raises(ModelInputError, match="URLs are not fetched"):
        load_prompt_audio("https://example.com/voice.wav", normalize_loudness=True)


def test_samples_need_a_rate_and_finite_values() -> None:
    wav = speechlike(1.5, 9, 16_000)
    with pytest.raises(ModelInputError, match="ref_audio_sample_rate") as err:
        load_prompt_audio(wav, normalize_loudness=False)
    assert err.value.param == "ref_audio_sample_rate"
    wav[100] = np.inf
    with pytest.raises(ModelInputError, match="ref_audio: samples must be finite"):
        load_prompt_audio(wav, 16_000, normalize_loudness=False)


def test_hours_of_audio_are_refused_before_any_work() -> None:
    with pytest.raises(ModelInputError, match=r"ref_audio: too long \(200\.00 s"):
        prepare_prompt_audio(np.zeros(200 * 8_000, np.float32), 8_000, normalize_loudness=True)


def test_channels_first_samples_are_averaged() -> None:
    left, right = speechlike(1.2, 1, 16_000), speechlike(1.2, 2, 16_000)
    both = prepare_prompt_audio(np.stack([left, right]), 16_000, normalize_loudness=False)
    assert np.array_equal(both.speaker, (left + right) / np.float32(2))
    assert LOUDNESS_LUFS == -23.0
