"""What the fuzzer knows about the protocol (docs/protocol.md, docs/protocol-extensions.md): limits,
value domains and close codes, as the documents give them, never read from the server."""

from __future__ import annotations

ECHO_MAX = 256
"""Longest ``event_id`` an error may echo back: a server must not amplify a client's
megabyte id into every answer (the cap protocol/messages.py gives ids)."""
TRANSPORT_FACTOR = 4
"""The server's WebSocket frame cap is this many times ``max_message_bytes``
(voiceserver.config.Limits.transport_max_bytes); above it frames are dropped unread."""
EMBEDDING_MAX = 8192
MAX_DELAY_MS_MAX = 600_000
IDLE_MIN_S = 0.1
INT64_MAX = 2**63 - 1

ENCODINGS = ("pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw", "opus")
PCM_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
ALL_RATES = tuple(sorted(set(PCM_RATES) | set(OPUS_RATES)))
CONTAINERS = ("raw", "ogg")
FRAME_MS = (10, 20, 40, 60)
BITRATE_RANGE = (6000, 510_000)
CONTEXT_ID_MAX = 128
ERROR_FRAME_MAX = 8192
"""An error frame larger than this echoes client input back wholesale (amplification)."""

CLOSE_NORMAL = 1000
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL = 1011
CLOSE_IDLE = 4008
CLOSE_ABNORMAL = 1006
PAST_TRANSPORT_CLOSES = (CLOSE_TOO_BIG, CLOSE_ABNORMAL)
"""A frame past the transport's cap is dropped while the client is still writing it;
the server's 1009 close frame can be lost to the TCP reset that follows (1006)."""
