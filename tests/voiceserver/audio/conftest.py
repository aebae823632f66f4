"""Shared test signals and measurements for the audio stage tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest


def make_speechlike(sample_rate: int, seconds: float, seed: int = 0) -> np.ndarray:
    """440 Hz + 1 kHz tones plus 300-3400 Hz noise bursts with a syllable-rate envelope.

    The tones check pitch and level; the noise makes alignment by
    cross-correlation unambiguous (a pure tone would align at any period).
    """
    n = int(round(sample_rate * seconds))
    t = np.arange(n) / sample_rate
    tones = 0.25 * np.sin(2 * np.pi * 440 * t) + 0.15 * np.sin(2 * np.pi * 1000 * t)
    rng = np.random.default_rng(seed)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1 / sample_rate)
    spectrum[(freqs < 300) | (freqs > min(3400, 0.45 * sample_rate))] = 0
    noise = np.fft.irfft(spectrum, n)
    noise *= 0.2 / np.sqrt(np.mean(noise**2))
    envelope = np.clip(np.sin(2 * np.pi * 4 * t), 0, None)
    return (tones + noise * envelope).astype(np.float32)


def make_tone(sample_rate: int, seconds: float, freq: float, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(round(sample_rate * seconds))) / sample_rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


@dataclass(frozen=True)
class Match:
    lag: int
    snr_db: float
    corr: float


def align_and_compare(ref: np.ndarray, out: np.ndarray, max_lag: int = 4000) -> Match:
    """Find where `ref` starts inside `out` (codec delay) and compare there."""
    ref = ref.astype(np.float64)
    out = out.astype(np.float64)
    span = min(len(ref), len(out) - max_lag)
    assert span > 0, f"decoded audio too short: {len(out)} samples for {len(ref)} in"
    size = 1 << int(np.ceil(np.log2(span + max_lag + len(ref))))
    xcorr = np.fft.irfft(np.fft.rfft(out, size) * np.conj(np.fft.rfft(ref[:span], size)), size)
    lag = int(np.argmax(xcorr[: max_lag + 1]))
    seg = out[lag : lag + span]
    want = ref[:span]
    noise = np.sum((seg - want) ** 2)
    snr = 10 * np.log10(np.sum(want**2) / max(noise, 1e-20))
    corr = float(np.corrcoef(seg, want)[0, 1])
    return Match(lag=lag, snr_db=float(snr), corr=corr)


def peak_hz(x: np.ndarray, sample_rate: int) -> float:
    window = np.hanning(len(x))
    spectrum = np.abs(np.fft.rfft(x * window))
    return float(np.fft.rfftfreq(len(x), 1 / sample_rate)[np.argmax(spectrum)])


@pytest.fixture
def speechlike() -> Callable[..., np.ndarray]:
    return make_speechlike


@pytest.fixture
def tone() -> Callable[..., np.ndarray]:
    return make_tone


@pytest.fixture
def compare() -> Callable[..., Match]:
    return align_and_compare


@pytest.fixture
def spectrum_peak() -> Callable[[np.ndarray, int], float]:
    return peak_hz


def random_chunks(x: np.ndarray, seed: int = 1, max_len: int = 700) -> list[np.ndarray]:
    """Split `x` at random points, with some empty chunks, as a vocoder might deliver it."""
    rng = np.random.default_rng(seed)
    chunks, i = [], 0
    while i < len(x):
        n = int(rng.integers(0, max_len))
        chunks.append(x[i : i + n])
        i += n
    return chunks


@pytest.fixture
def chunker() -> Callable[..., list[np.ndarray]]:
    return random_chunks
