"""Ogg/Opus (RFC 7845) through FFmpeg's libopus encoder and Ogg muxer (PyAV).

Pages are handed out as the muxer completes them, so the stream plays while it
grows. The muxer keeps the newest page until the next packet (or the end) so it
can mark the final page EOS: a page reaches the client one frame late.
"""

from __future__ import annotations

import av

from voiceserver.audio.encoders.muxed import MuxedEncoder
from voiceserver.audio.format import DEFAULT_OPUS_BITRATE, DEFAULT_OPUS_FRAME_MS


class OggOpusEncoder(MuxedEncoder):
    """Float32 mono PCM -> an Ogg/Opus byte stream that a stock decoder plays.

    Unlike raw Opus, the end is exact: the last packet is short and the final
    granule position trims the padding, so the stream decodes to exactly the
    samples it was given (pre-skip hides the encoder delay at the start).
    `page_ms` trades latency for the 27+ bytes each page costs; by default
    every packet closes its page.
    """

    content_type = "audio/ogg;codecs=opus"
    needs_audio = True

    def __init__(
        self,
        sample_rate: int,
        frame_ms: int = DEFAULT_OPUS_FRAME_MS,
        bitrate: int | None = None,
        application: str = "audio",
        page_ms: int | None = None,
        complexity: int | None = None,
    ) -> None:
        self.sample_rate = sample_rate
        self.frame_ms = frame_ms
        self.frame_size = sample_rate * frame_ms // 1000
        self.bitrate = bitrate or DEFAULT_OPUS_BITRATE[sample_rate]
        super().__init__()
        container = av.open(
            self._sink,
            "w",
            format="ogg",
            options={"page_duration": str((page_ms or frame_ms) * 1000), "flush_packets": "1"},
        )
        # Same application as the raw encoder: see opus.py for why "audio".
        codec_options = {"application": application, "frame_duration": str(frame_ms)}
        if complexity is not None:
            codec_options["compression_level"] = str(complexity)
        stream = container.add_stream(
            "libopus", rate=sample_rate, layout="mono", options=codec_options
        )
        stream.codec_context.format = "flt"
        stream.bit_rate = self.bitrate
        self._start(container, stream, "flt", self.frame_size)
