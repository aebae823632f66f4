"""Browsers: short-lived connect tokens and CORS, through a real server on loopback.

A page must never hold the API key: its backend mints a token with the key
(POST /v1/auth/tokens), the page opens a socket with ``?token=``. A page on
another origin calls HTTP endpoints with fetch only when the server answers CORS.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
import websockets

from tests.serving import RunningServer, run_server
from tests.wsclient import Client
from voiceserver.config import ServerConfig, load_model_config
from voiceserver.transport.tokens import TokenSigner

KEY = "backend-only-key"
PAGE = "https://app.example"
EVIL = "https://evil.example"
VLLM_PATH = "/v1/audio/speech/stream"


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    config = ServerConfig(api_keys=(KEY,), allowed_origins=(PAGE,))
    with run_server(load_model_config("tiny"), config) as running:
        yield running


@pytest.fixture(scope="module")
def other_server() -> Iterator[RunningServer]:
    config = ServerConfig(api_keys=(KEY,), allowed_origins=(PAGE,))
    with run_server(load_model_config("tiny"), config) as running:
        yield running


def mint(server: RunningServer, body: dict | None = None, key: str | None = KEY) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{server.http}/v1/auth/tokens", json=body, headers=headers)


def vllm_url(server: RunningServer) -> str:
    return f"ws://{server.host}:{server.port}{VLLM_PATH}"


async def refused(url: str, origin: str = PAGE) -> websockets.InvalidStatus:
    with pytest.raises(websockets.InvalidStatus) as err:
        await websockets.connect(url, additional_headers={"origin": origin})
    return err.value


def test_token_is_minted_with_the_key_and_refused_without(server: RunningServer) -> None:
    before = time.time()
    answer = mint(server, {"expires_in_s": 120})
    assert answer.status_code == 200
    body = answer.json()
    assert body["scope"] == "connect"
    assert body["expires_in_s"] == 120
    assert before + 119 <= body["expires_at"] <= time.time() + 121
    assert KEY not in body["token"]
    default = mint(server).json()
    assert default["expires_in_s"] == 60
    assert default["token"] != body["token"]

    for key in (None, "wrong"):
        denied = mint(server, key=key)
        assert denied.status_code == 401
        assert denied.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("value", [0, 3601, -5, "60", 1.5, True, None])
def test_bad_expiry_names_the_field(server: RunningServer, value: object) -> None:
    answer = mint(server, {"expires_in_s": value})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "expires_in_s"
    assert "expires_in_s" in error["message"]


def test_malformed_body_is_a_clear_400(server: RunningServer) -> None:
    answer = httpx.post(
        f"{server.http}/v1/auth/tokens",
        content=b"[1, 2",
        headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"},
    )
    assert answer.status_code == 400
    assert "JSON" in answer.json()["error"]["message"]


@pytest.mark.parametrize("path", ["native", "vllm"])
async def test_fresh_token_opens_both_sockets(server: RunningServer, path: str) -> None:
    token = mint(server).json()["token"]
    url = server.ws if path == "native" else vllm_url(server)
    ws = await websockets.connect(f"{url}?token={token}", additional_headers={"origin": PAGE})
    assert ws.response.status_code == 101
    await ws.close()


async def test_a_token_speaks_on_the_native_socket(server: RunningServer) -> None:
    token = mint(server).json()["token"]
    client = await Client.connect(
        f"{server.ws}?token={token}&voice=tiny-a", additional_headers={"origin": PAGE}
    )
    try:
        await client.send(type="text.append", context_id="t", text="hello there")
        await client.send(type="context.end", context_id="t")
        await client.until_audio("t")
        assert len(client.got.audio["t"]) > 0
    finally:
        await client.close()


async def test_open_socket_closes_when_its_token_expires(server: RunningServer) -> None:
    """A socket lives as long as its token (then 4001); a fresh token opens another."""
    token = mint(server, {"expires_in_s": 1}).json()["token"]
    ws = await websockets.connect(f"{server.ws}?token={token}", additional_headers={"origin": PAGE})
    with pytest.raises(websockets.ConnectionClosed) as closed:
        async with asyncio.timeout(10):
            while True:
                await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4001
    assert refusal_of_now(server, token) is not None
    assert (await refused(f"{server.ws}?token={token}")).response.status_code == 401
    fresh = mint(server, {"expires_in_s": 60}).json()["token"]
    again = await websockets.connect(
        f"{server.ws}?token={fresh}", additional_headers={"origin": PAGE}
    )
    await (await again.ping())
    await again.close()


def refusal_of_now(server: RunningServer, token: str) -> str | None:
    return server.app.state.token_signer.verify(token)  # type: ignore[attr-defined]


@pytest.mark.parametrize("url_of", [lambda s: s.ws, vllm_url], ids=["native", "vllm"])
async def test_expired_token_is_refused(server: RunningServer, url_of) -> None:  # type: ignore[no-untyped-def]
    signer: TokenSigner = server.app.state.token_signer  # type: ignore[attr-defined]
    stale = signer.mint_until(int(time.time()) - 1).token
    err = await refused(f"{url_of(server)}?token={stale}")
    assert err.response.status_code == 401
    assert b"expired token" in err.response.body


async def test_tampered_token_is_refused(server: RunningServer) -> None:
    token = mint(server).json()["token"]
    expires_at, nonce, signature = token.split(".")
    later = f"{int(expires_at) + 3600}.{nonce}.{signature}"
    flipped = f"{expires_at}.{nonce}.{signature[:-1]}{'0' if signature[-1] != '0' else '1'}"
    for bad in (later, flipped):
        err = await refused(f"{server.ws}?token={bad}")
        assert err.response.status_code == 401
        assert b"invalid token" in err.response.body
    err = await refused(f"{server.ws}?token=not-a-token")
    assert err.response.status_code == 401


async def test_token_from_another_server_is_refused(
    server: RunningServer, other_server: RunningServer
) -> None:
    token = mint(other_server).json()["token"]
    for url in (server.ws, vllm_url(server)):
        err = await refused(f"{url}?token={token}")
        assert err.response.status_code == 401
        assert b"another server" in err.response.body


async def test_missing_credentials_say_what_to_pass(server: RunningServer) -> None:
    err = await refused(server.ws)
    assert err.response.status_code == 401
    assert b"?token=" in err.response.body


async def test_token_does_not_open_a_socket_from_a_foreign_page(server: RunningServer) -> None:
    token = mint(server).json()["token"]
    err = await refused(f"{server.ws}?token={token}", origin=EVIL)
    assert err.response.status_code == 403
    assert b"--cors-origin" in err.response.body


def test_preflight_for_allowed_origin(server: RunningServer) -> None:
    for path in ("/v1/audio/speech", "/v1/auth/tokens"):
        answer = httpx.options(
            f"{server.http}{path}",
            headers={
                "origin": PAGE,
                "access-control-request-method": "POST",
                "access-control-request-headers": "authorization, content-type",
            },
        )
        assert answer.status_code == 204
        assert answer.headers["access-control-allow-origin"] == PAGE
        assert "POST" in answer.headers["access-control-allow-methods"]
        allowed_headers = answer.headers["access-control-allow-headers"].lower()
        assert "authorization" in allowed_headers and "content-type" in allowed_headers
        assert int(answer.headers["access-control-max-age"]) > 0


def test_preflight_for_foreign_origin_has_no_cors(server: RunningServer) -> None:
    answer = httpx.options(
        f"{server.http}/v1/audio/speech",
        headers={"origin": EVIL, "access-control-request-method": "POST"},
    )
    assert answer.status_code == 403
    assert not any(h.startswith("access-control-") for h in answer.headers)


def test_responses_carry_cors_for_the_allowed_origin(server: RunningServer) -> None:
    headers = {"origin": PAGE, "authorization": f"Bearer {KEY}"}
    speech = httpx.post(
        f"{server.http}/v1/audio/speech",
        json={"input": "hi", "response_format": "wav"},
        headers=headers,
    )
    assert speech.status_code == 200
    assert speech.headers["access-control-allow-origin"] == PAGE
    token = httpx.post(f"{server.http}/v1/auth/tokens", headers=headers)
    assert token.status_code == 200
    assert token.headers["access-control-allow-origin"] == PAGE
    # Errors carry it too, so the page can read why it was refused.
    denied = httpx.post(f"{server.http}/v1/auth/tokens", headers={"origin": PAGE})
    assert denied.status_code == 401
    assert denied.headers["access-control-allow-origin"] == PAGE

    foreign = httpx.post(
        f"{server.http}/v1/auth/tokens", headers={"origin": EVIL, "authorization": f"Bearer {KEY}"}
    )
    assert foreign.status_code == 403
    assert "access-control-allow-origin" not in foreign.headers
    plain = httpx.post(f"{server.http}/v1/auth/tokens", headers={"authorization": f"Bearer {KEY}"})
    assert "access-control-allow-origin" not in plain.headers


def test_keyless_server_mints_and_stays_open() -> None:
    with run_server(load_model_config("tiny"), ServerConfig()) as open_server:
        answer = httpx.post(f"{open_server.http}/v1/auth/tokens")
        assert answer.status_code == 200
        assert answer.json()["scope"] == "connect"
