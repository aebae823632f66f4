"""The browser SDK and the demo page, served by a real server on loopback."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.serving import run_server
from voiceserver.config import ServerConfig, load_model_config
from voiceserver.http.web import WEB_DIR

SDK = WEB_DIR / "sdk" / "voiceserver.js"


def test_sdk_and_demo_page_are_served_without_credentials() -> None:
    config = ServerConfig(api_keys=("k",))
    with run_server(load_model_config("tiny"), config) as server, httpx.Client() as http:
        sdk = http.get(f"{server.http}/sdk/voiceserver.js")
        assert sdk.status_code == 200
        assert sdk.headers["content-type"] == "text/javascript; charset=utf-8"
        assert sdk.headers["cache-control"] == "no-cache"
        assert sdk.content == SDK.read_bytes()
        assert "export {" in sdk.text and "VoiceClient" in sdk.text
        page = http.get(f"{server.http}/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        # Everything the page loads is served, and its script imports the served SDK.
        for ref in re.findall(r'(?:src|href)="(/[^"]+)"', page.text):
            assert http.get(f"{server.http}{ref}").status_code == 200, ref
        demo = http.get(f"{server.http}/demo.js").text
        assert 'from "/sdk/voiceserver.js"' in demo
        # The API itself still wants the key.
        assert http.get(f"{server.http}/v1/audio/voices").status_code == 401


def test_no_demo_leaves_only_the_sdk() -> None:
    config = ServerConfig(demo_page=False)
    with run_server(load_model_config("tiny"), config) as server, httpx.Client() as http:
        assert http.get(f"{server.http}/").status_code == 404
        assert http.get(f"{server.http}/demo.js").status_code == 404
        assert http.get(f"{server.http}/sdk/voiceserver.js").status_code == 200


def test_the_built_sdk_is_package_data() -> None:
    """A wheel carries the page and the SDK (pyproject package-data covers them)."""
    import tomllib

    root = Path(__file__).resolve().parents[3]
    data = tomllib.loads((root / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["voiceserver"]
    shipped = {p.relative_to(WEB_DIR.parent) for pat in patterns for p in WEB_DIR.parent.glob(pat)}
    assert {p.relative_to(WEB_DIR.parent) for p in WEB_DIR.rglob("*") if p.is_file()} <= shipped
