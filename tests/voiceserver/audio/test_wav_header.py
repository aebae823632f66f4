import io
import wave

import av
import numpy as np
import pytest

from voiceserver.audio.wav import wav_header


def test_sized_header_reads_back_with_the_stdlib():
    samples = np.arange(-500, 500, dtype="<i2")
    data = samples.tobytes()
    header = wav_header(16000, data_bytes=len(data))
    assert len(header) == 44
    with wave.open(io.BytesIO(header + data)) as reader:
        assert reader.getparams()[:4] == (1, 2, 16000, 1000)
        assert reader.readframes(1000) == data


def test_streamed_header_has_unknown_sizes_and_still_plays():
    samples = (np.sin(np.arange(2400) / 10) * 10000).astype("<i2")
    header = wav_header(24000, data_bytes=None)
    assert len(header) == 44
    assert header[4:8] == b"\xff\xff\xff\xff" and header[40:44] == b"\xff\xff\xff\xff"
    container = av.open(io.BytesIO(header + samples.tobytes()))
    assert container.streams.audio[0].codec_context.sample_rate == 24000
    decoded = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])
    np.testing.assert_array_equal(decoded, samples)


def test_float_header_is_ieee_float():
    samples = np.linspace(-1, 1, 480, dtype="<f4")
    header = wav_header(48000, bits=32, data_bytes=samples.nbytes, float_samples=True)
    container = av.open(io.BytesIO(header + samples.tobytes()))
    assert container.streams.audio[0].codec_context.name == "pcm_f32le"
    decoded = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])
    np.testing.assert_array_equal(decoded, samples)


def test_bad_arguments():
    with pytest.raises(ValueError):
        wav_header(24000, bits=12)
    with pytest.raises(ValueError):
        wav_header(24000, bits=16, float_samples=True)
