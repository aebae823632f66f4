"""POST /v1/auth/tokens: mint a short-lived connect token for a browser page.

Authorized with the API key (``Authorization: Bearer <key>``), so only the
user's backend can mint. Body (optional JSON object): ``{"expires_in_s": N}``,
an integer in 1..3600, default 60. Answer: ``{"token", "expires_at" (unix
seconds), "expires_in_s", "scope": "connect"}``. The page opens a socket with
``?token=<token>``. With no API key configured the server is open, so the
endpoint answers anyway and sockets do not need the token.
"""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from protocol.errors import ErrorCode
from voiceserver.http.errors import ApiError, check_auth, error_response, invalid
from voiceserver.http.guard import ClientGone, client_gone_response
from voiceserver.http.speech import read_body, request_id_of, runtime_of
from voiceserver.transport.tokens import (
    DEFAULT_EXPIRES_S,
    MAX_EXPIRES_S,
    MIN_EXPIRES_S,
    SCOPE,
    TokenSigner,
)


def _expires_in(raw: bytes) -> int:
    if not raw.strip():
        return DEFAULT_EXPIRES_S
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ApiError(400, f"malformed JSON body: {exc}", code=ErrorCode.INVALID_JSON) from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object", code=ErrorCode.INVALID_JSON)
    value = body.get("expires_in_s", DEFAULT_EXPIRES_S)
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid("expires_in_s", f"must be an integer number of seconds, got {value!r}")
    if not MIN_EXPIRES_S <= value <= MAX_EXPIRES_S:
        raise invalid("expires_in_s", f"must be {MIN_EXPIRES_S}..{MAX_EXPIRES_S}, got {value}")
    return value


async def mint_token(request: Request) -> Response:
    request_id = request_id_of(request)
    rt = runtime_of(request)
    signer: TokenSigner = request.app.state.token_signer
    try:
        check_auth(request, rt.server.api_keys)
        expires_in_s = _expires_in(await read_body(request))
    except ApiError as err:
        return error_response(err, request_id, rt.metrics, "http")
    except ClientGone:
        return client_gone_response()
    minted = signer.mint(expires_in_s)
    return JSONResponse(
        {
            "token": minted.token,
            "expires_at": minted.expires_at,
            "expires_in_s": expires_in_s,
            "scope": SCOPE,
        },
        headers={"x-request-id": request_id, "cache-control": "no-store"},
    )
