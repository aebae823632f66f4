"""Telling whether a context's word timestamps will come."""

from __future__ import annotations

from protocol.messages import WarningMessage


def is_no_timestamps_warning(msg: WarningMessage) -> bool:
    """The server's answer to ``timestamps: word`` for a context whose model (or its
    settings) cannot align words: the audio comes, the timestamps do not."""
    return msg.code == "unsupported_value" and "timestamp" in msg.message
