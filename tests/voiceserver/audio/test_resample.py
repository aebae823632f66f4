import numpy as np
import pytest
import soxr

from voiceserver.audio.format import OPUS_SAMPLE_RATES, PCM_SAMPLE_RATES
from voiceserver.audio.resample import StreamResampler

OUT_RATES = sorted(set(PCM_SAMPLE_RATES) | set(OPUS_SAMPLE_RATES))


def run_chunked(resampler: StreamResampler, chunks: list[np.ndarray]) -> np.ndarray:
    parts = [resampler.process(c) for c in chunks]
    parts.append(resampler.flush())
    return np.concatenate(parts)


def test_equal_rates_pass_audio_through_untouched(chunker):
    x = np.random.default_rng(0).uniform(-1, 1, 5000).astype(np.float32)
    r = StreamResampler(24000, 24000)
    out = run_chunked(r, chunker(x))
    assert r.passthrough
    np.testing.assert_array_equal(out, x)
    assert (r.samples_in, r.samples_out) == (5000, 5000)


@pytest.mark.parametrize(
    ("in_rate", "out_rate"),
    [(22050, 24000), (22050, 8000), (22050, 48000), (24000, 16000), (24000, 44100), (24000, 12000)],
)
def test_chunked_equals_one_shot(in_rate, out_rate, speechlike, chunker):
    x = speechlike(in_rate, 0.7)
    one_shot = soxr.resample(x, in_rate, out_rate, quality="HQ")
    out = run_chunked(StreamResampler(in_rate, out_rate), chunker(x))
    assert out.dtype == np.float32
    assert len(out) == len(one_shot) == round(len(x) * out_rate / in_rate)
    np.testing.assert_allclose(out, one_shot, atol=1e-5)


@pytest.mark.parametrize("in_rate", [22050, 24000])
@pytest.mark.parametrize("out_rate", OUT_RATES)
def test_tone_keeps_its_frequency_and_level(in_rate, out_rate, tone, spectrum_peak, chunker):
    x = tone(in_rate, 0.5, freq=1000.0, amp=0.5)
    r = StreamResampler(in_rate, out_rate)
    out = run_chunked(r, chunker(x, max_len=2000))
    assert len(out) == pytest.approx(len(x) * out_rate / in_rate, abs=1)
    assert r.samples_out == len(out)
    # Frequency resolution is 2 Hz for 0.5 s; a wrong ratio would move the peak by far more.
    assert spectrum_peak(out, out_rate) == pytest.approx(1000.0, abs=2.5)
    middle = out[len(out) // 4 : 3 * len(out) // 4]
    assert np.sqrt(2 * np.mean(middle**2)) == pytest.approx(0.5, rel=0.01)


def test_first_output_arrives_within_a_block_of_input():
    # libsoxr's block latency, which the OutputStage passes on: bounded, not "whole stream".
    r = StreamResampler(22050, 24000)
    fed = 0
    while not len(r.process(np.zeros(220, np.float32))):
        fed += 220
        assert fed < 22050 // 10, "no output after 100 ms of input"


def test_misuse_is_an_error():
    r = StreamResampler(22050, 24000)
    with pytest.raises(ValueError, match="mono"):
        r.process(np.zeros((2, 100), np.float32))
    r.flush()
    with pytest.raises(RuntimeError):
        r.process(np.zeros(10, np.float32))
    with pytest.raises(ValueError):
        StreamResampler(0, 24000)
