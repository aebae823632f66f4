"""The time-stretch stage alone: a pure tone keeps its frequency (found by an FFT) and
its level while its length becomes exactly 1/tempo, streamed in uneven chunks, with
flush points, and with nothing lost at the end."""

from __future__ import annotations

import numpy as np
import pytest

from voiceserver.audio.stretch import TempoStretch, tempo_stages

RATE = 24000
TEMPOS = [0.25, 0.4, 0.5, 0.8, 1.5, 2.0, 3.0, 4.0]


def stretched(stretch: TempoStretch, chunks: list[np.ndarray]) -> np.ndarray:
    parts = [stretch.process(c) for c in chunks]
    parts.append(stretch.finish())
    return np.concatenate(parts)


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))


@pytest.mark.parametrize("tempo", TEMPOS)
def test_a_tone_keeps_its_pitch_and_level_and_lasts_one_over_tempo(
    tempo, tone, spectrum_peak, chunker
):
    for freq in (220.0, 1000.0):
        x = tone(RATE, 2.0, freq)
        out = stretched(TempoStretch(tempo, RATE), chunker(x))
        assert out.dtype == np.float32
        assert len(out) == round(len(x) / tempo)
        # FFT bins are 1/duration apart: 0.5 Hz at 4x.
        assert abs(spectrum_peak(out, RATE) - freq) <= max(1.0, 0.005 * freq)
        middle = out[len(out) // 4 : 3 * len(out) // 4]
        assert abs(20 * np.log10(rms(middle) / rms(x))) < 1.5


@pytest.mark.parametrize("tempo", TEMPOS)
def test_every_flush_point_is_exact(tempo, tone):
    stretch = TempoStretch(tempo, RATE)
    x = tone(RATE, 0.5, 300.0)
    out = 0
    for piece in range(4):
        for start in range(0, len(x), 1000 + 317 * piece):
            out += len(stretch.process(x[start : start + 1000 + 317 * piece]))
            assert out == stretch.samples_out <= round(stretch.samples_in / tempo)
        out += len(stretch.drain())
        # Everything received so far is out, to the sample: word times stay on the audio.
        assert out == round(stretch.samples_in / tempo)
    out += len(stretch.finish())
    assert out == round(4 * len(x) / tempo)


@pytest.mark.parametrize("tempo", TEMPOS)
def test_the_tail_is_not_lost(tempo, tone):
    """A tone burst in the last 60 ms of the stream comes out whole at the end."""
    silence = np.zeros(RATE // 2, np.float32)
    burst = tone(RATE, 0.06, 500.0)
    x = np.concatenate([silence, burst])
    out = stretched(TempoStretch(tempo, RATE), [x[i : i + 480] for i in range(0, len(x), 480)])
    assert len(out) == round(len(x) / tempo)
    start = round(len(silence) / tempo)
    # WSOLA moves audio by up to about half its window: measured onsets 6-25 ms early
    # in input time for one stage; two chained stages (3x, 4x) 12-18 ms of output.
    slack = round(RATE * max(0.03 / tempo, 0.025))
    burst_out = out[start - slack :]
    assert np.sum(burst_out**2) >= 0.9 * np.sum(burst**2) / tempo
    assert np.sum(out[: start - slack] ** 2) < 0.05 * np.sum(burst**2) / tempo


@pytest.mark.parametrize("tempo", [0.25, 0.5, 2.0, 4.0])
def test_what_it_holds_back_is_bounded(tempo, tone):
    """Streaming in 20 ms chunks, the output never lags the input by more than 250 ms of
    the input's audio (the filter's window, two of them for two stages)."""
    stretch = TempoStretch(tempo, RATE)
    x = tone(RATE, 2.0, 200.0)
    worst = 0.0
    for start in range(0, len(x), 480):
        stretch.process(x[start : start + 480])
        held = stretch.samples_in - stretch.samples_out * tempo
        worst = max(worst, held / RATE)
    assert worst <= 0.25


def test_stages_stay_in_atempos_range():
    assert tempo_stages(1.5) == [1.5]
    assert tempo_stages(0.5) == [0.5] and tempo_stages(2.0) == [2.0]
    assert tempo_stages(4.0) == [2.0, 2.0] and tempo_stages(3.0) == [1.5, 2.0]
    assert tempo_stages(0.25) == [0.5, 0.5] and tempo_stages(0.3) == pytest.approx([0.5, 0.6])
    for tempo in np.linspace(0.25, 4.0, 61):
        stages = tempo_stages(float(tempo))
        assert all(0.5 <= s <= 2.0 for s in stages)
        assert np.prod(stages) == pytest.approx(tempo)
    for bad in (0.2, 4.5, 0.0):
        with pytest.raises(ValueError, match="0.25 to 4.0"):
            tempo_stages(bad)


def test_closed_and_finished_streams():
    stretch = TempoStretch(2.0, RATE)
    assert len(stretch.process(np.zeros(0, np.float32))) == 0
    assert len(stretch.drain()) == 0  # nothing received: nothing to drain
    assert len(stretch.finish()) == 0
    with pytest.raises(RuntimeError):
        stretch.process(np.zeros(10, np.float32))
    stretch.close()
    assert len(stretch.drain()) == 0
