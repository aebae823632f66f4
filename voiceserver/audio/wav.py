"""RIFF/WAVE headers, including the open-ended kind used for streamed WAV."""

from __future__ import annotations

import struct

UNKNOWN_SIZE = 0xFFFFFFFF
_WAVE_FORMAT_PCM = 1
_WAVE_FORMAT_IEEE_FLOAT = 3


def wav_header(
    sample_rate: int,
    channels: int = 1,
    bits: int = 16,
    data_bytes: int | None = None,
    *,
    float_samples: bool = False,
) -> bytes:
    """The canonical 44-byte header; `data_bytes=None` writes 0xFFFFFFFF sizes (length unknown)."""
    if bits % 8 or not 8 <= bits <= 64:
        raise ValueError(f"bits must be a multiple of 8 in 8..64, got {bits}")
    if float_samples and bits not in (32, 64):
        raise ValueError(f"float samples need 32 or 64 bits, got {bits}")
    block_align = channels * bits // 8
    if data_bytes is None:
        riff_size = data_size = UNKNOWN_SIZE
    else:
        if not 0 <= data_bytes <= UNKNOWN_SIZE - 36:
            raise ValueError(f"data_bytes out of range for WAV: {data_bytes}")
        riff_size, data_size = 36 + data_bytes, data_bytes
    fmt_tag = _WAVE_FORMAT_IEEE_FLOAT if float_samples else _WAVE_FORMAT_PCM
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        riff_size,
        b"WAVE",
        b"fmt ",
        16,
        fmt_tag,
        channels,
        sample_rate,
        sample_rate * block_align,
        block_align,
        bits,
        b"data",
        data_size,
    )
