"""Credentials in query strings never reach the log."""

from __future__ import annotations

import logging

from voiceserver.logs import TokenRedactingFilter, redact


def test_redact_masks_only_the_token_value() -> None:
    assert redact("/v1/audio/speech/ws?token=s3cr3t") == "/v1/audio/speech/ws?token=***"
    assert (
        redact("/ws?voice=joe&token=abc&encoding=opus") == "/ws?voice=joe&token=***&encoding=opus"
    )
    assert redact("/ws?TOKEN=abc") == "/ws?TOKEN=***"
    assert redact("/ws?mytoken=abc") == "/ws?mytoken=abc"  # another parameter


def test_filter_rewrites_uvicorn_style_records() -> None:
    record = logging.LogRecord(
        "uvicorn.error",
        logging.INFO,
        __file__,
        1,
        '%s - "WebSocket %s" [accepted]',
        ("127.0.0.1:5000", "/v1/audio/speech/ws?token=hunter2"),
        None,
    )
    assert TokenRedactingFilter().filter(record)
    assert "hunter2" not in record.getMessage()
    assert "token=***" in record.getMessage()
