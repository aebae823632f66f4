"""Connect tokens: valid until their expiry, bound to the signer's secret."""

from __future__ import annotations

from voiceserver.transport.tokens import TokenSigner


def test_token_valid_until_expiry() -> None:
    signer = TokenSigner()
    minted = signer.mint(60, now=1000.0)
    assert minted.expires_at == 1060
    assert signer.verify(minted.token, now=1059.9) is None
    assert "expired" in (signer.verify(minted.token, now=1060.0) or "")


def test_other_secret_and_tampering_are_refused() -> None:
    signer = TokenSigner()
    token = signer.mint(60, now=1000.0).token
    assert "invalid" in (TokenSigner().verify(token, now=1000.0) or "")
    expires_at, nonce, signature = token.split(".")
    assert "invalid" in (signer.verify(f"{expires_at}.x{nonce}.{signature}", now=1000.0) or "")
    for bad in ("", "abc", "1.2", "x.y.z", f"-{token}"):
        assert signer.verify(bad, now=1000.0) is not None
