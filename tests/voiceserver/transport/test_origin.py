"""Which Origin headers may drive the server."""

from __future__ import annotations

import pytest

from voiceserver.transport.origin import origin_allowed


@pytest.mark.parametrize(
    ("origin", "host", "allowed", "ok"),
    [
        (None, "localhost:8000", (), True),  # not a browser
        ("http://localhost:8000", "localhost:8000", (), True),  # the server's own page
        ("HTTP://LOCALHOST:8000/", "localhost:8000", (), True),
        ("https://voice.example", "voice.example", (), True),  # default port 443
        ("https://voice.example", "voice.example:443", (), True),
        ("http://voice.example", "voice.example:80", (), True),
        ("http://localhost:3000", "localhost:8000", (), False),  # another local app
        ("https://evil.example", "localhost:8000", (), False),
        ("null", "localhost:8000", (), False),  # sandboxed frame, file: page
        ("https://app.example", "localhost:8000", ("https://app.example",), True),
        ("https://APP.example/", "localhost:8000", ("https://app.example",), True),
        ("https://other.example", "localhost:8000", ("https://app.example",), False),
        ("https://anything.example", "localhost:8000", ("*",), True),
        ("null", "localhost:8000", ("null",), True),
        ("http://localhost:8000", None, (), False),  # no Host: cannot be same-origin
        ("not a url", "localhost:8000", (), False),
        ("http://[::1]:8000", "[::1]:8000", (), True),
        ("http://localhost:99999", "localhost:99999", (), False),  # invalid port
    ],
)
def test_origin_rule(
    origin: str | None, host: str | None, allowed: tuple[str, ...], ok: bool
) -> None:
    assert origin_allowed(origin, host, "http", allowed) is ok
