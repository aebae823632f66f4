"""One piece of audio as the client received it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AudioChunk:
    """Audio of one context, in the context's output format.

    ``received_at`` is ``time.monotonic()`` when the frame came off the socket (for
    time-to-first-audio and underrun measurement). ``flush_end``/``context_end``
    mirror the binary frame flags; base64 audio carries no flags, so they stay False
    there (``context.flushed``/``context.done`` say the same thing).
    """

    seq: int
    payload: bytes
    flush_end: bool
    context_end: bool
    received_at: float
