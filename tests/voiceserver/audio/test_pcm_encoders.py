import struct

import av
import numpy as np
import pytest

from voiceserver.audio.encoders.pcm import PcmEncoder
from voiceserver.audio.format import PCM_ENCODINGS


def encode_all(enc: PcmEncoder, chunks: list[np.ndarray]) -> list[bytes]:
    payloads = [p for c in chunks for p in enc.encode(c)]
    return payloads + enc.flush()


def mulaw_to_linear(code: int) -> int:
    """ITU-T G.711 mu-law expansion, written from the standard (the oracle)."""
    u = ~code & 0xFF
    exponent, mantissa = (u >> 4) & 7, u & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return -magnitude if u & 0x80 else magnitude


def alaw_to_linear(code: int) -> int:
    """ITU-T G.711 A-law expansion (13-bit scaled to 16), from the standard (the oracle)."""
    a = code ^ 0x55
    exponent, mantissa = (a >> 4) & 7, a & 0x0F
    segment_base = (mantissa << 4) + (8 if exponent == 0 else 0x108)
    magnitude = segment_base << max(exponent - 1, 0)
    return magnitude if a & 0x80 else -magnitude


G711_ORACLES = {"pcm_mulaw": mulaw_to_linear, "pcm_alaw": alaw_to_linear}


def test_s16le_is_little_endian_clipped_and_rounded():
    enc = PcmEncoder("pcm_s16le", 24000)
    x = np.array([-1.0, -0.5, 0.0, 0.5, 1.0, 1.5, -2.0, 1 / 32767], dtype=np.float32)
    (payload,) = enc.encode(x)
    values = struct.unpack("<8h", payload)
    assert values == (-32767, -16384, 0, 16384, 32767, 32767, -32767, 1)
    assert payload[:2] == b"\x01\x80"  # -32767, low byte first
    assert enc.samples_emitted == 8
    assert enc.content_type == "audio/pcm;encoding=s16le;rate=24000;channels=1"


def test_f32le_keeps_samples_and_clips():
    enc = PcmEncoder("pcm_f32le", 48000)
    x = np.array([0.25, -0.75, 3.0, -3.0, 1e-7], dtype=np.float32)
    (payload,) = enc.encode(x)
    assert struct.unpack("<5f", payload) == pytest.approx([0.25, -0.75, 1.0, -1.0, 1e-7])


@pytest.mark.parametrize("encoding", PCM_ENCODINGS)
def test_chunked_equals_one_shot(encoding, speechlike, chunker):
    x = speechlike(16000, 0.5)
    one_shot = b"".join(encode_all(PcmEncoder(encoding, 16000), [x]))
    chunked = encode_all(PcmEncoder(encoding, 16000), chunker(x))
    assert all(chunked), "no empty payloads"
    assert b"".join(chunked) == one_shot


@pytest.mark.parametrize("encoding", PCM_ENCODINGS)
def test_frame_ms_gives_fixed_size_payloads(encoding, speechlike, chunker):
    enc = PcmEncoder(encoding, 8000, frame_ms=20)
    x = speechlike(8000, 0.33)  # 2640 samples = 16 frames of 160 + 80
    payloads = encode_all(enc, chunker(x, max_len=300))
    width = {"pcm_s16le": 2, "pcm_f32le": 4}.get(encoding, 1)
    assert [len(p) for p in payloads] == [160 * width] * 16 + [80 * width]
    assert enc.samples_emitted == len(x)


def test_g711_known_codes():
    x = np.array([0.0, 1.0, -1.0], dtype=np.float32)
    (mulaw,) = PcmEncoder("pcm_mulaw", 8000).encode(x)
    (alaw,) = PcmEncoder("pcm_alaw", 8000).encode(x)
    assert mulaw == bytes([0xFF, 0x80, 0x00])
    assert alaw == bytes([0xD5, 0xAA, 0x2A])
    assert mulaw_to_linear(0x80) == 32124 and alaw_to_linear(0xAA) == 32256


@pytest.mark.parametrize("encoding", ["pcm_mulaw", "pcm_alaw"])
def test_g711_decodes_to_the_input(encoding, speechlike):
    x = speechlike(8000, 1.0)
    payloads = encode_all(PcmEncoder(encoding, 8000), [x[:3000], x[3000:]])
    data = b"".join(payloads)
    assert len(data) == len(x)
    oracle = np.array([G711_ORACLES[encoding](b) for b in data], dtype=np.float64) / 32768
    error = oracle - x
    snr = 10 * np.log10(np.sum(x.astype(np.float64) ** 2) / np.sum(error**2))
    assert snr > 30  # G.711 gives about 38 dB on speech-level signals

    # FFmpeg's decoder must agree with the oracle sample for sample.
    codec = av.CodecContext.create(encoding, "r")
    codec.sample_rate = 8000
    codec.layout = "mono"
    frames = codec.decode(av.Packet(data))
    decoded = np.concatenate([f.to_ndarray().reshape(-1) for f in frames])
    np.testing.assert_array_equal(decoded, (oracle * 32768).astype(np.int16))


def test_a_broken_g711_stream_fails_the_oracle_check(speechlike):
    x = speechlike(8000, 0.5)
    (payload,) = PcmEncoder("pcm_mulaw", 8000).encode(x)
    decoded = np.array([alaw_to_linear(b) for b in payload], dtype=np.float64) / 32768
    error = decoded - x
    # mu-law read as A-law: the same threshold as above must reject it.
    assert 10 * np.log10(np.sum(x.astype(np.float64) ** 2) / np.sum(error**2)) < 10


def test_use_after_flush_is_an_error():
    enc = PcmEncoder("pcm_s16le", 24000)
    enc.flush()
    with pytest.raises(RuntimeError):
        enc.encode(np.zeros(4, np.float32))
