import io
from concurrent.futures import ThreadPoolExecutor

import av
import numpy as np
import opuslib
import pytest
import soxr

from voiceserver.audio.format import PCM_ENCODINGS
from voiceserver.audio.pipeline import AudioFormat, AudioFormatError, OutputStage, make_output


def run(stage: OutputStage, chunks: list[np.ndarray]) -> list[bytes]:
    return [p for c in chunks for p in stage.push(c)] + stage.finish()


def s16_samples(data: bytes) -> np.ndarray:
    return np.frombuffer(data, "<i2").astype(np.int32)


@pytest.mark.parametrize("out_rate", [8000, 24000, 44100])
def test_pcm_chunked_equals_one_shot_through_the_resampler(out_rate, speechlike, chunker):
    x = speechlike(22050, 0.6)
    fmt = AudioFormat("pcm_s16le", out_rate)
    one_shot = b"".join(run(make_output(fmt, 22050), [x]))
    stage = make_output(fmt, 22050)
    chunked = b"".join(run(stage, chunker(x)))
    assert len(chunked) == len(one_shot) == 2 * round(len(x) * out_rate / 22050)
    # Chunked resampling differs from one-shot only by float rounding: at most 1 LSB.
    assert np.abs(s16_samples(chunked) - s16_samples(one_shot)).max() <= 1
    assert stage.samples_emitted == len(chunked) // 2
    assert stage.audio_ms == 600


@pytest.mark.parametrize("encoding", PCM_ENCODINGS)
def test_every_pcm_encoding_carries_the_resampled_signal(encoding, speechlike, chunker):
    x = speechlike(24000, 0.5)
    stage = make_output(AudioFormat(encoding, 16000), 24000)
    data = b"".join(run(stage, chunker(x)))
    codec = {"pcm_s16le": "s16le", "pcm_f32le": "f32le", "pcm_mulaw": "mulaw", "pcm_alaw": "alaw"}
    # Read the bytes back with FFmpeg's raw demuxer, as a client would play them.
    container = av.open(io.BytesIO(data), format=codec[encoding], options={"sample_rate": "16000"})
    decoded = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])
    decoded = decoded.astype(np.float64) / (32768 if decoded.dtype == np.int16 else 1)
    want = soxr.resample(x, 24000, 16000)
    assert len(decoded) == len(want) == stage.samples_emitted
    assert np.corrcoef(decoded, want)[0, 1] > 0.999


def test_opus_through_the_resampler_keeps_pitch(tone, spectrum_peak):
    x = tone(22050, 1.0, freq=440.0, amp=0.3) + tone(22050, 1.0, freq=1000.0, amp=0.2)
    stage = make_output(AudioFormat("opus", 48000, frame_ms=20), 22050)
    packets = run(stage, np.array_split(x, 17))
    assert len(packets) == 50 == stage.samples_emitted // 960  # 1 s in 20 ms packets
    decoder = opuslib.Decoder(48000, 1)
    decoded = np.concatenate(
        [np.frombuffer(decoder.decode_float(p, 960), np.float32) for p in packets]
    )
    spectrum = np.abs(np.fft.rfft(decoded * np.hanning(len(decoded))))
    freqs = np.fft.rfftfreq(len(decoded), 1 / 48000)

    def level(hz: float) -> float:
        return float(spectrum[np.abs(freqs - hz) <= 3].max())

    assert spectrum_peak(decoded, 48000) == pytest.approx(440, abs=2)
    assert level(1000) / level(440) == pytest.approx(0.2 / 0.3, rel=0.15)
    assert stage.content_type == "audio/opus"


def test_ogg_stage_plays_and_counts_exact_samples(speechlike):
    x = speechlike(22050, 0.8)
    stage = make_output(AudioFormat("opus", 24000, "ogg"), 22050)
    data = b"".join(run(stage, np.array_split(x, 5)))
    decoded = np.concatenate(
        [f.to_ndarray().reshape(-1) for f in av.open(io.BytesIO(data)).decode(audio=0)]
    )
    assert len(decoded) == 2 * stage.samples_emitted == 2 * round(len(x) * 24000 / 22050)
    assert stage.content_type == "audio/ogg;codecs=opus"


@pytest.mark.parametrize("container", ["raw", "ogg"])
def test_opus_complexity_is_a_cpu_knob_that_still_decodes(container, speechlike):
    x = speechlike(24000, 0.5)
    fmt = AudioFormat("opus", 24000, container)
    default = b"".join(run(make_output(fmt, 24000), [x]))
    cheap = b"".join(run(make_output(fmt, 24000, opus_complexity=0), [x]))
    assert cheap != default
    if container == "ogg":
        decoded = np.concatenate(
            [f.to_ndarray().reshape(-1) for f in av.open(io.BytesIO(cheap)).decode(audio=0)]
        )
        assert len(decoded) == 24000  # 0.5 s at 48 kHz
    with pytest.raises(ValueError, match="opus_complexity"):
        make_output(fmt, 24000, opus_complexity=11)


def test_nan_and_overload_never_reach_the_wire():
    stage = make_output(AudioFormat("pcm_f32le", 24000), 24000)
    x = np.array([np.nan, 2.0, -np.inf, 0.5], dtype=np.float32)
    values = np.frombuffer(b"".join(run(stage, [x])), "<f4")
    np.testing.assert_array_equal(values, [0.0, 1.0, -1.0, 0.5])


def test_usable_from_any_thread_one_at_a_time(speechlike):
    x = speechlike(22050, 0.5)
    chunks = np.array_split(x, 8)
    fmt = AudioFormat("opus", 24000)
    expected = run(make_output(fmt, 22050), chunks)
    stage = make_output(fmt, 22050)
    got = []
    with ThreadPoolExecutor(max_workers=3) as pool:
        for chunk in chunks:
            got += pool.submit(stage.push, chunk).result()
        got += pool.submit(stage.finish).result()
    assert got == expected


def test_bad_format_and_misuse():
    with pytest.raises(AudioFormatError, match="sample_rate"):
        make_output(AudioFormat("opus", 22050), 22050)
    stage = make_output(AudioFormat(), 24000)
    stage.finish()
    with pytest.raises(RuntimeError):
        stage.push(np.zeros(10, np.float32))
    cancelled = make_output(AudioFormat("opus", 24000, "ogg"), 24000)
    cancelled.push(np.zeros(2400, np.float32))
    cancelled.close()
    assert cancelled.finished
    with pytest.raises(RuntimeError):
        cancelled.push(np.zeros(10, np.float32))
