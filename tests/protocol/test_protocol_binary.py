"""The 8-byte audio header, checked against a struct.pack oracle and literal bytes."""

import struct

import pytest

from protocol import (
    FLAG_CONTEXT_END,
    FLAG_FLUSH_END,
    HEADER_SIZE,
    AudioFrame,
    ErrorCode,
    ProtocolError,
    pack_audio,
    unpack_audio,
)


@pytest.mark.parametrize(
    ("stream", "seq", "flags", "payload"),
    [
        (0, 0, 0, b""),
        (1, 1, FLAG_FLUSH_END, b"\x01\x02"),
        (7, 258, FLAG_CONTEXT_END, bytes(range(256))),
        (0xFFFF, 0xFFFFFFFF, FLAG_FLUSH_END | FLAG_CONTEXT_END, b"x" * 3840),
    ],
)
def test_pack_matches_struct_oracle_and_round_trips(stream, seq, flags, payload):
    data = pack_audio(stream, seq, flags, payload)
    assert data == struct.pack("<BBHI", 1, flags, stream, seq) + payload
    frame = unpack_audio(data)
    assert frame == AudioFrame(stream=stream, seq=seq, flags=flags, payload=payload)
    assert frame.flush_end == bool(flags & 1)
    assert frame.context_end == bool(flags & 2)


def test_header_byte_layout_is_little_endian():
    assert HEADER_SIZE == 8
    assert FLAG_FLUSH_END == 1 and FLAG_CONTEXT_END == 2
    data = pack_audio(0x0102, 0x03040506, 3, b"P")
    assert data == bytes([1, 3, 0x02, 0x01, 0x06, 0x05, 0x04, 0x03]) + b"P"


@pytest.mark.parametrize("data", [b"", b"\x01", b"\x01\x00\x00\x00\x00\x00\x00"])
def test_short_frame(data):
    with pytest.raises(ProtocolError) as info:
        unpack_audio(data)
    assert info.value.code is ErrorCode.INVALID_FRAME


@pytest.mark.parametrize("version", [0, 2, 255])
def test_wrong_version(version):
    with pytest.raises(ProtocolError) as info:
        unpack_audio(struct.pack("<BBHI", version, 0, 1, 0) + b"abc")
    assert info.value.code is ErrorCode.INVALID_FRAME
    assert str(version) in info.value.message


def test_unpack_accepts_buffers_and_copies_payload():
    buf = bytearray(pack_audio(2, 5, 0, b"abcd"))
    frame = unpack_audio(memoryview(buf))
    buf[-1] = ord("z")
    assert frame.payload == b"abcd"
    assert isinstance(frame.payload, bytes)


@pytest.mark.parametrize(
    ("stream", "seq", "flags"),
    [(-1, 0, 0), (0x10000, 0, 0), (0, -1, 0), (0, 2**32, 0), (0, 0, 256), (0, 0, -1)],
)
def test_pack_rejects_out_of_range_fields(stream, seq, flags):
    with pytest.raises(ValueError):
        pack_audio(stream, seq, flags, b"")
