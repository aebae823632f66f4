"""The binary audio frame: an 8-byte little-endian header, then the payload.

Header layout (``struct`` format ``<BBHI``)::

    u8  version   always 1
    u8  flags     bit0 FLAG_FLUSH_END: last frame of a flush
                  bit1 FLAG_CONTEXT_END: last frame of the context
    u16 stream    the number context.created announced for the context
    u32 seq       counts from 0 per context
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from protocol.errors import ErrorCode, ProtocolError

FRAME_VERSION = 1
FLAG_FLUSH_END = 1
FLAG_CONTEXT_END = 2
HEADER = struct.Struct("<BBHI")
HEADER_SIZE = HEADER.size  # 8
MAX_STREAM = 0xFFFF
MAX_SEQ = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class AudioFrame:
    """One decoded audio frame. ``context_id`` is filled in by ClientSession."""

    stream: int
    seq: int
    flags: int
    payload: bytes
    context_id: str | None = None

    @property
    def flush_end(self) -> bool:
        return bool(self.flags & FLAG_FLUSH_END)

    @property
    def context_end(self) -> bool:
        return bool(self.flags & FLAG_CONTEXT_END)


def pack_audio(stream: int, seq: int, flags: int, payload: bytes) -> bytes:
    """Header + payload. Raises ValueError for a stream, seq or flags out of range."""
    if not 0 <= stream <= MAX_STREAM:
        raise ValueError(f"stream {stream} out of range 0..{MAX_STREAM}")
    if not 0 <= seq <= MAX_SEQ:
        raise ValueError(f"seq {seq} out of range 0..{MAX_SEQ}")
    if not 0 <= flags <= 0xFF:
        raise ValueError(f"flags {flags} out of range 0..255")
    return HEADER.pack(FRAME_VERSION, flags, stream, seq) + payload


def unpack_audio(data: bytes | bytearray | memoryview) -> AudioFrame:
    """Parse a frame; raises ProtocolError(invalid_frame) if short or of another version."""
    if len(data) < HEADER_SIZE:
        raise ProtocolError(
            ErrorCode.INVALID_FRAME,
            f"audio frame of {len(data)} bytes is shorter than the {HEADER_SIZE}-byte header",
        )
    version, flags, stream, seq = HEADER.unpack_from(data)
    if version != FRAME_VERSION:
        raise ProtocolError(
            ErrorCode.INVALID_FRAME,
            f"audio frame version {version} is not supported (expected {FRAME_VERSION})",
        )
    return AudioFrame(stream=stream, seq=seq, flags=flags, payload=bytes(data[HEADER_SIZE:]))
