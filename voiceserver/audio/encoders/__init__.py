"""Encoders from float32 PCM to wire payloads; pick one with `make_encoder`."""

from __future__ import annotations

from voiceserver.audio.encoders.base import Encoder, FrameBuffer
from voiceserver.audio.encoders.ogg_opus import OggOpusEncoder
from voiceserver.audio.encoders.pcm import PcmEncoder
from voiceserver.audio.format import AudioFormat


def make_encoder(fmt: AudioFormat, *, opus_complexity: int | None = None) -> Encoder:
    """A fresh encoder for one context in format `fmt` (validated here).

    `opus_complexity` (0-10, libopus default 9) is a server-side CPU/quality knob:
    on one core 10 and 9 cost about 20 ms per second of 24 kHz audio, 5 about 4 ms.
    """
    if opus_complexity is not None and not 0 <= opus_complexity <= 10:
        raise ValueError(f"opus_complexity must be 0-10, got {opus_complexity}")
    fmt = fmt.normalized()
    if not fmt.is_opus:
        return PcmEncoder(fmt.encoding, fmt.sample_rate, fmt.frame_ms)
    assert fmt.frame_ms is not None and fmt.bitrate is not None
    if fmt.container == "ogg":
        return OggOpusEncoder(
            fmt.sample_rate, fmt.frame_ms, fmt.bitrate, complexity=opus_complexity
        )
    # Imported on use: raw Opus needs the system libopus, which PCM-only setups may lack.
    from voiceserver.audio.encoders.opus import OpusPacketEncoder

    return OpusPacketEncoder(fmt.sample_rate, fmt.frame_ms, fmt.bitrate, complexity=opus_complexity)


__all__ = ["Encoder", "FrameBuffer", "OggOpusEncoder", "PcmEncoder", "make_encoder"]
