"""Logging rules: credentials never reach the log.

Browsers cannot set headers on a WebSocket, so they may pass the API key as
``?token=``; uvicorn logs every request's path with its query string (the
access log, and the "WebSocket ... [accepted]" line). The filter here masks
the token's value in those records wherever it appears.
"""

from __future__ import annotations

import logging
import re
import time

_TOKEN = re.compile(r"((?:^|[?&])token=)[^&\s\"']*", re.IGNORECASE)
MASK = "***"
REDACTED_LOGGERS = ("uvicorn.access", "uvicorn.error")


def redact(text: str) -> str:
    return _TOKEN.sub(rf"\1{MASK}", text)


class TokenRedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and "token=" in record.msg.lower():
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(
                redact(arg) if isinstance(arg, str) and "token=" in arg.lower() else arg
                for arg in record.args
            )
        return True


def redact_tokens() -> None:
    """Install the filter on uvicorn's loggers (once)."""
    for name in REDACTED_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, TokenRedactingFilter) for f in logger.filters):
            logger.addFilter(TokenRedactingFilter())


class Throttled:
    """Log lines about client input, at most ``per_interval`` per ``interval_s`` for each
    kind: a client that repeats a refused message thousands of times a second must not
    fill the disk. The first line after a quiet spell says how many were left out."""

    def __init__(
        self, logger: logging.Logger, per_interval: int = 5, interval_s: float = 10.0
    ) -> None:
        self._log = logger
        self._per_interval = per_interval
        self._interval_s = interval_s
        self._windows: dict[str, list[float]] = {}
        """kind -> [window start, lines logged in it, lines left out]"""

    def log(self, level: int, kind: str, message: str, *args: object) -> None:
        now = time.monotonic()
        window = self._windows.get(kind)
        if window is None or now - window[0] >= self._interval_s:
            if window is not None and window[2]:
                self._log.log(
                    level, "%d more like the next were not logged (%s)", int(window[2]), kind
                )
            if len(self._windows) > MAX_THROTTLED_KINDS:
                self._windows.clear()
            window = self._windows[kind] = [now, 0, 0]
        if window[1] >= self._per_interval:
            window[2] += 1
            return
        window[1] += 1
        self._log.log(level, message, *args)


MAX_THROTTLED_KINDS = 1024
"""Kinds of line a Throttled logger keeps windows for before it starts afresh."""
