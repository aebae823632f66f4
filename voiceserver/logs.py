"""Logging rules: credentials never reach the log.

Browsers cannot set headers on a WebSocket, so they may pass the API key as
``?token=``; uvicorn logs every request's path with its query string (the
access log, and the "WebSocket ... [accepted]" line). The filter here masks
the token's value in those records wherever it appears.
"""

from __future__ import annotations

import logging
import re

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
