import io
import struct
from dataclasses import dataclass

import av
import numpy as np
import pytest
import soxr

from voiceserver.audio.encoders.ogg_opus import OggOpusEncoder
from voiceserver.audio.format import OPUS_SAMPLE_RATES


@dataclass
class Page:
    header_type: int
    granule: int
    packets: bytes


def parse_pages(data: bytes) -> list[Page]:
    """Walk Ogg pages (RFC 3533) and check that they tile the stream exactly."""
    pages, pos = [], 0
    while pos < len(data):
        assert data[pos : pos + 4] == b"OggS", f"no page at byte {pos}"
        header_type, granule = data[pos + 5], struct.unpack_from("<q", data, pos + 6)[0]
        n_segments = data[pos + 26]
        body = sum(data[pos + 27 : pos + 27 + n_segments])
        start = pos + 27 + n_segments
        pages.append(Page(header_type, granule, data[start : start + body]))
        pos = start + body
    assert pos == len(data)
    return pages


def decode_ogg(data: bytes) -> tuple[np.ndarray, av.container.InputContainer]:
    container = av.open(io.BytesIO(data))
    frames = [f.to_ndarray().reshape(-1) for f in container.decode(audio=0)]
    return np.concatenate(frames).astype(np.float32), container


def encode_all(enc: OggOpusEncoder, chunks: list[np.ndarray]) -> list[bytes]:
    return [p for c in chunks for p in enc.encode(c)] + enc.flush()


@pytest.mark.parametrize("sample_rate", OPUS_SAMPLE_RATES)
def test_stream_plays_in_a_stock_decoder(sample_rate, speechlike, chunker, compare):
    x = speechlike(sample_rate, 1.0)[: sample_rate - 37]  # not a whole number of frames
    enc = OggOpusEncoder(sample_rate, 20)
    data = b"".join(encode_all(enc, chunker(x, max_len=sample_rate // 10)))

    decoded, container = decode_ogg(data)
    stream = container.streams.audio[0]
    assert stream.codec_context.name == "opus"
    assert stream.codec_context.sample_rate == 48000
    # Pre-skip and the final granule position trim the stream to exactly the input.
    assert len(decoded) == round(len(x) * 48000 / sample_rate)
    assert enc.samples_emitted == len(x)
    match = compare(soxr.resample(x, sample_rate, 48000), decoded, max_lag=2000)
    assert match.lag <= 12  # pre-skip removed the 6.5 ms encoder delay (0.25 ms left at most)
    assert match.corr > 0.9 and match.snr_db > 8, match


def test_headers_and_end_of_stream_are_well_formed(speechlike):
    x = speechlike(24000, 0.5)
    data = b"".join(encode_all(OggOpusEncoder(24000, 20), [x]))
    pages = parse_pages(data)
    assert pages[0].header_type & 0x02  # beginning of stream
    head = pages[0].packets
    assert head[:8] == b"OpusHead" and head[9] == 1  # mono
    pre_skip, input_rate = struct.unpack_from("<HI", head, 10)
    assert input_rate == 24000 and pre_skip > 0
    assert pages[1].packets[:8] == b"OpusTags"
    assert pages[-1].header_type & 0x04  # end of stream
    assert not any(p.header_type & 0x04 for p in pages[:-1])
    assert pages[-1].granule == pre_skip + 24000  # 0.5 s at 48 kHz granules


def test_pages_stream_out_before_the_end(speechlike):
    enc = OggOpusEncoder(24000, 20)
    x = speechlike(24000, 1.0)
    early = []
    for chunk in np.array_split(x, 10):
        payloads = enc.encode(chunk)
        assert all(p[:4] == b"OggS" for p in payloads)  # each payload is whole pages
        early += payloads
    parse_pages(b"".join(early))
    # All but the newest page is out already, and that prefix plays on its own.
    decoded, _ = decode_ogg(b"".join(early))
    assert len(decoded) >= 48000 - 2 * 960
    rest = enc.flush()
    assert rest and parse_pages(b"".join(rest))[-1].header_type & 0x04


def test_empty_context_is_still_a_valid_stream():
    data = b"".join(OggOpusEncoder(16000, 20).flush())
    decoded, _ = decode_ogg(data)
    assert len(decoded) == 960 and np.abs(decoded).max() < 1e-3


def test_close_discards_and_stops():
    enc = OggOpusEncoder(24000, 20)
    enc.encode(np.zeros(4800, np.float32))
    enc.close()
    with pytest.raises(RuntimeError):
        enc.encode(np.zeros(10, np.float32))
