"""Writing 16-bit mono PCM to a WAV file (stdlib ``wave``)."""

from __future__ import annotations

import wave
from pathlib import Path


def write_wav(path: str | Path, pcm_s16le: bytes, sample_rate: int) -> None:
    """Write mono s16le samples as a WAV file."""
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(sample_rate)
        out.writeframes(pcm_s16le)
