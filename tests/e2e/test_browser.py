"""The browser SDK and the demo page in headless Chromium, against a real server with
the default model (Piper). Chromium is Debian's; playwright-core (npm, clients/js)
drives it with no browser download. Each test runs one scenario of
clients/js/test/browser/driver.mjs and asserts on what the page measured from inside
(the AudioWorklet's own counters) and on the frames the browser received (read by
the driver off the socket, independently of the SDK)."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serving import RunningServer, run_server
from voiceserver.config import ServerConfig, load_model_config

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "clients" / "js"
DRIVER = JS / "test" / "browser" / "driver.mjs"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
KEY = "browser-test-key"
ARTIFACTS = ROOT / "test-output"

# `make test` installs both; a bare pytest without them skips, except in CI.
pytestmark = pytest.mark.skipif(
    not os.environ.get("CI")
    and not (Path(CHROMIUM).exists() and (JS / "node_modules" / "playwright-core").is_dir()),
    reason="needs Debian's chromium and clients/js/node_modules (make test installs both)",
)


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with run_server(load_model_config("piper-joe"), ServerConfig()) as running:
        yield running


@pytest.fixture(scope="module")
def app_origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Another web app's origin: a static server on loopback, reached as localhost
    (a different origin from the voice server's 127.0.0.1, and still a secure context)."""
    root = tmp_path_factory.mktemp("app")
    (root / "app.html").write_text("<!doctype html><title>app</title>", encoding="utf-8")
    handler = functools.partial(QuietHandler, directory=str(root))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def keyed_server(app_origin: str) -> Iterator[RunningServer]:
    config = ServerConfig(api_keys=(KEY,), allowed_origins=(app_origin,))
    with run_server(load_model_config("piper-joe"), config) as running:
        yield running


def browse(scenario: str, **args: Any) -> dict[str, Any]:
    proc = subprocess.run(
        ["node", str(DRIVER), scenario, json.dumps(args)],
        cwd=JS,
        capture_output=True,
        text=True,
        timeout=180,
        env={"PATH": "/usr/bin:/bin:/usr/local/bin", "CHROMIUM": CHROMIUM, "HOME": "/tmp"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize("encoding", ["pcm", "opus"])
def test_demo_page_plays_a_streamed_paragraph(server: RunningServer, encoding: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"demo-{encoding}.png"
    got = browse("demo", server=server.http, encoding=encoding, rate=100, screenshot=str(shot))
    assert got["encoding"] == encoding and not got["errors"], got
    done, player = got["done"], got["player"]
    assert not done["cancelled"] and done["audioMs"] > 5000
    # What the worklet rendered is the whole context, within 10 % of what the server sent.
    assert abs(got["played"]["playedMs"] - done["audioMs"]) <= 0.1 * done["audioMs"], got
    assert abs(player["playedMs"] - done["audioMs"]) <= 0.1 * done["audioMs"], got
    # ... and it is speech, not silence: most of it is above -60 dBFS.
    assert player["audibleMs"] > 0.5 * done["audioMs"], player
    assert player["underruns"] == 0 and got["stats"]["underruns"] == 0, got
    assert player["bytesReceived"] == got["stats"]["bytesReceived"] > 0
    assert 0 < got["stats"]["ttfaMs"] < done["audioMs"]
    assert "context.done" in got["serverTypes"]
    # The live figures on the page show the same numbers.
    figures = got["figures"]
    assert figures["underruns"] == "0" and figures["wire"].startswith(encoding), figures
    assert int(figures["bytes"].replace(",", "")) == player["bytesReceived"]
    assert re.fullmatch(r"\d+ ms", figures["ttfa"]), figures
    assert shot.stat().st_size > 10_000
    # Word timestamps reached the page: every word of the paragraph, all marked spoken.
    assert [w["text"] for w in got["words"]] == got["text"].split()
    assert all(w["said"] for w in got["words"])


def test_stop_silences_within_100_ms_and_the_server_confirms(server: RunningServer) -> None:
    # Text streams for ~7 s (10 tokens a second), so the context is still open when
    # the page stops it after 1.5 s of playback, however slowly a busy machine starts.
    got = browse("stop", server=server.http, encoding="opus", rate=10)
    assert not got["errors"], got
    assert got["done"]["cancelled"] is True
    # After the click, at most 100 ms more audio was rendered, then nothing.
    assert got["player"]["playedMs"] - got["atStopMs"] <= 100, got
    assert got["player"]["bufferedMs"] == 0
    assert got["cancel"]["playedMs"] <= got["player"]["playedMs"] + 1
    # The server answered context.cancelled, and the SDK told it how much was played.
    cancelled = [f for f in got["serverFrames"] if f["type"] == "context.cancelled"]
    assert len(cancelled) == 1, [f["type"] for f in got["serverFrames"]]
    assert cancelled[0]["audio_sent_ms"] == got["cancel"]["audioSentMs"]
    assert got["cancel"]["playedMs"] <= cancelled[0]["audio_sent_ms"]
    assert not [f for f in got["serverFrames"] if f["type"] == "context.done"]
    assert got["status"].startswith("Stopped after")


def readme_example() -> str:
    """The HTML example in clients/js/README.md, exactly as a user copies it."""
    text = (JS / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```html\n(.*?)```", text, re.S)
    assert blocks, "clients/js/README.md has no html example"
    return blocks[0]


def test_the_readme_example_speaks(server: RunningServer) -> None:
    html = readme_example()
    script = html[html.index("<script") : html.index("</script>")].splitlines()[1:]
    assert len([line for line in script if line.strip()]) <= 10
    got = browse("readme", server=server.http, html=html)
    assert got["result"]["audioMs"] > 500, got
    assert got["result"]["ttfaMs"] > 0
    assert "context.done" in got["serverTypes"]


def mint(server: RunningServer, seconds: int) -> str:
    answer = httpx.post(
        f"{server.http}/v1/auth/tokens",
        json={"expires_in_s": seconds},
        headers={"authorization": f"Bearer {KEY}"},
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["token"]


def test_a_page_of_another_origin_connects_with_a_token(
    keyed_server: RunningServer, app_origin: str
) -> None:
    expired = mint(keyed_server, 1)
    time.sleep(1.5)
    tokens = {
        "fresh": mint(keyed_server, 60),
        "expired": expired,
        "wrong": mint(keyed_server, 60)[:-4] + "AAAA",
        "none": None,
    }
    got = browse("token", server=keyed_server.http, pageOrigin=app_origin, tokens=tokens)
    outcomes = got["outcomes"]
    assert outcomes["fresh"]["ok"] and outcomes["fresh"]["audioMs"] > 0, outcomes
    for name in ("expired", "wrong", "none"):
        assert outcomes[name] == {
            "ok": False,
            "code": "connect_failed",
            "message": outcomes[name]["message"],
        }, outcomes
        assert "token" in outcomes[name]["message"]


def test_reconnects_only_when_nothing_is_in_flight(server: RunningServer) -> None:
    got = browse("reconnect", server=server.http)["result"]
    # Idle: the server closed the socket (idle timeout), the client reconnected.
    assert got["afterIdle"][:1] == ["reconnecting"] and "reconnected" in got["afterIdle"], got
    # In flight: the context fails, and the client says it will not reconnect.
    assert got["lost"] == "connection_lost", got
    assert (
        got["events"][-1]["name"] == "disconnected" and len(got["events"][-1]["lostContexts"]) == 1
    )
    assert got["events"][-1]["code"] == 1009, got["events"]
