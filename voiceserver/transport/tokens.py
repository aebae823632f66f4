"""Short-lived connect tokens: what a browser page presents instead of the API key.

A token is ``<expires_at>.<nonce>.<signature>``, the signature an HMAC-SHA256 of
``connect.<expires_at>.<nonce>`` under a random secret made when the app is built.
Nothing is stored: verifying needs only the secret, so a restart (or another
server instance) invalidates every token. A socket opened with a token lives
until the token expires: then it finishes what it is speaking and closes (4001).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

SCOPE = "connect"
MIN_EXPIRES_S = 1
MAX_EXPIRES_S = 3600
DEFAULT_EXPIRES_S = 60
_TOKEN = re.compile(r"([0-9]{1,12})\.([A-Za-z0-9_-]{1,64})\.([0-9a-f]{64})", re.ASCII)
"""``<expires_at>.<nonce>.<signature>``: ASCII digits only (``str.isdigit`` also takes
"²", which ``int`` refuses), an expiry of at most 12 digits (``int`` refuses strings of
over 4,300 digits), a URL-safe nonce and a hex HMAC-SHA256."""


@dataclass(frozen=True)
class MintedToken:
    token: str
    """The opaque string a page passes as ``?token=``."""
    expires_at: int
    """Unix seconds after which the token no longer opens a socket."""


class TokenSigner:
    """Mints and checks connect tokens under one secret (one per app instance)."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    def _sign(self, expires_at: int, nonce: str) -> str:
        msg = f"{SCOPE}.{expires_at}.{nonce}".encode()
        return hmac.new(self._secret, msg, hashlib.sha256).hexdigest()

    def mint_until(self, expires_at: int) -> MintedToken:
        """A token valid until ``expires_at`` (unix seconds), which may be past."""
        nonce = secrets.token_urlsafe(12)
        return MintedToken(f"{expires_at}.{nonce}.{self._sign(expires_at, nonce)}", expires_at)

    def mint(self, expires_in_s: int, now: float | None = None) -> MintedToken:
        now = time.time() if now is None else now
        return self.mint_until(int(now) + expires_in_s)

    def verify(self, token: str | None, now: float | None = None) -> str | None:
        """None when ``token`` opens a socket now, else why not (for the close reason)."""
        if not token:
            return "missing token"
        match = _TOKEN.fullmatch(token)
        if match is None:
            return "malformed token"
        expires_at, nonce, signature = int(match[1]), match[2], match[3]
        if not hmac.compare_digest(signature.encode(), self._sign(expires_at, nonce).encode()):
            return (
                "invalid token (wrong signature, or minted by another server or before a restart)"
            )
        now = time.time() if now is None else now
        if now >= expires_at:
            return "expired token: mint a fresh one with POST /v1/auth/tokens"
        return None

    def expires_at(self, token: str) -> int | None:
        """When a token that ``verify`` accepted stops opening sockets (unix seconds)."""
        match = _TOKEN.fullmatch(token)
        return int(match[1]) if match is not None else None

    def nonce_of(self, token: str, now: float | None = None) -> str | None:
        """The nonce of a valid, unexpired token (its identity as a client), else None."""
        if self.verify(token, now) is not None:
            return None
        match = _TOKEN.fullmatch(token)
        return match[2] if match is not None else None
