import math

import av
import numpy as np
import opuslib
import pytest
import soxr

from voiceserver.audio.encoders.opus import OpusPacketEncoder
from voiceserver.audio.format import OPUS_SAMPLE_RATES

MAX_FRAME_S = 0.12  # longest Opus packet: lets the decoder report each packet's true length


def encode_all(enc: OpusPacketEncoder, chunks: list[np.ndarray]) -> list[bytes]:
    return [p for c in chunks for p in enc.encode(c)] + enc.flush()


def decode_libopus(packets: list[bytes], sample_rate: int) -> list[np.ndarray]:
    """opuslib's Decoder: libopus itself, at the stream's own rate."""
    decoder = opuslib.Decoder(sample_rate, 1)
    max_samples = int(sample_rate * MAX_FRAME_S)
    return [np.frombuffer(decoder.decode_float(p, max_samples), np.float32) for p in packets]


def frame_to_float(frame: av.AudioFrame) -> np.ndarray:
    pcm = frame.to_ndarray().reshape(-1)
    if pcm.dtype == np.int16:
        return pcm.astype(np.float32) / 32768
    return pcm.astype(np.float32)


def decode_pyav(packets: list[bytes], codec_name: str) -> list[np.ndarray]:
    """FFmpeg: 'libopus' wraps libopus, 'opus' is FFmpeg's own decoder; both give 48 kHz."""
    codec = av.CodecContext.create(codec_name, "r")
    codec.sample_rate = 48000
    codec.layout = "mono"
    out = []
    for p in packets:
        frames = codec.decode(av.Packet(p))
        assert all(f.sample_rate == 48000 for f in frames)
        out.append(np.concatenate([np.zeros(0, np.float32)] + [frame_to_float(f) for f in frames]))
    return out


@pytest.mark.parametrize("sample_rate", OPUS_SAMPLE_RATES)
@pytest.mark.parametrize("frame_ms", [10, 20, 40, 60])
def test_one_packet_per_frame_each_exactly_frame_ms(sample_rate, frame_ms, speechlike, chunker):
    x = speechlike(sample_rate, 0.23)
    enc = OpusPacketEncoder(sample_rate, frame_ms)
    packets = encode_all(enc, chunker(x, max_len=sample_rate // 20))
    frame_size = sample_rate * frame_ms // 1000
    assert len(packets) == math.ceil(len(x) / frame_size)
    assert enc.samples_emitted == len(packets) * frame_size
    assert all(packets)
    assert [len(p) for p in decode_libopus(packets, sample_rate)] == [frame_size] * len(packets)
    assert [len(p) for p in decode_pyav(packets, "libopus")] == [frame_ms * 48] * len(packets)


@pytest.mark.parametrize("sample_rate", OPUS_SAMPLE_RATES)
def test_packets_decode_to_the_input(sample_rate, speechlike, compare):
    x = speechlike(sample_rate, 1.0)
    enc = OpusPacketEncoder(sample_rate, 20)
    packets = encode_all(enc, [x])

    decoded = np.concatenate(decode_libopus(packets, sample_rate))
    match = compare(x, decoded)
    assert abs(match.lag - enc.lookahead) <= 4  # the only offset is the encoder's lookahead
    assert match.corr > 0.9 and match.snr_db > 8, match

    reference_48k = soxr.resample(x, sample_rate, 48000)
    for codec_name in ("libopus", "opus"):
        decoded_48k = np.concatenate(decode_pyav(packets, codec_name))
        match = compare(reference_48k, decoded_48k)
        assert match.corr > 0.9 and match.snr_db > 8, (codec_name, match)


def test_reordered_packets_fail_the_same_check(speechlike, compare):
    x = speechlike(24000, 1.0)
    packets = encode_all(OpusPacketEncoder(24000, 20), [x])
    swapped = [packets[i ^ 1] for i in range(len(packets) - 1)]
    match = compare(x, np.concatenate(decode_libopus(swapped, 24000)))
    assert not (match.corr > 0.9 and match.snr_db > 8), match


def test_chunked_input_gives_the_same_packets(speechlike, chunker):
    x = speechlike(16000, 0.5)
    one_shot = encode_all(OpusPacketEncoder(16000, 20), [x])
    chunked = encode_all(OpusPacketEncoder(16000, 20), chunker(x))
    assert chunked == one_shot


def test_bitrate_is_honoured(speechlike):
    x = speechlike(48000, 2.0)
    measured = {}
    for bitrate in (16000, 64000):
        packets = encode_all(OpusPacketEncoder(48000, 20, bitrate=bitrate), [x])
        measured[bitrate] = 8 * sum(len(p) for p in packets) / 2.0
        # VBR: near the target on average, not exactly on it.
        assert 0.6 * bitrate < measured[bitrate] < 1.5 * bitrate, measured
    assert measured[64000] > 2.5 * measured[16000]


def test_nothing_is_padded_when_the_audio_fills_whole_frames():
    enc = OpusPacketEncoder(24000, 20)
    assert enc.encode(np.zeros(480 * 3, np.float32)) != []
    assert enc.flush() == []
    empty = OpusPacketEncoder(24000, 20)
    assert empty.encode(np.zeros(100, np.float32)) == []
    assert len(empty.flush()) == 1
    assert OpusPacketEncoder(24000, 20).flush() == []
