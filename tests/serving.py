"""Run the real server (uvicorn, real sockets) in a background thread for tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from voiceserver.app import create_app
from voiceserver.config import EnginesConfig, ModelConfig, ServerConfig
from voiceserver.server import build_server

TEST_SHUTDOWN_S = 2.0
"""Tests stop their servers with work possibly still running: a short drain."""
ENGINES_ENV = "VOICESERVER_TEST_ENGINES"
"""Set to N: every test server runs N engine processes instead of its engine thread
(``tests/e2e/test_engine_process_suite.py`` runs suites so)."""


@dataclass
class RunningServer:
    host: str
    port: int
    app: object

    @property
    def http(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://{self.host}:{self.port}/v1/audio/speech/ws"

    @property
    def runtime(self):  # type: ignore[no-untyped-def]
        return self.app.state.runtime  # type: ignore[attr-defined]


@contextlib.contextmanager
def run_server(
    model_config: ModelConfig, server_config: ServerConfig | None = None, log_level: str = "warning"
) -> Iterator[RunningServer]:
    server_config = server_config or ServerConfig()
    processes = int(os.environ.get(ENGINES_ENV, "0"))
    if processes and not server_config.engines.processes:
        server_config = replace(server_config, engines=EnginesConfig(processes=processes))
    server_config = replace(
        server_config, shutdown_timeout_s=min(server_config.shutdown_timeout_s, TEST_SHUTDOWN_S)
    )
    app = create_app(server_config, model_config)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = build_server(app, server_config, log_level=log_level)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.02)
    try:
        yield RunningServer("127.0.0.1", port, app)
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


@contextlib.contextmanager
def serve_model_dir(
    checkpoint: Path, voices: Path, timeout_s: float = 120.0
) -> Iterator[tuple[str, dict]]:
    """``voiceserver serve --model DIR`` as a user runs it (a subprocess, no --config, on a
    free port): its base URL and its ``/v1/models`` listing once it answers."""
    import subprocess
    import sys

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).parent / "voiceserver"
    args = [str(exe), "serve", "--model", str(checkpoint), "--port", str(port)]
    args += ["--log-level", "warning", "--voices-dir", str(voices)]
    proc = subprocess.Popen(
        args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                models = httpx.get(f"{base}/v1/models", timeout=2).json()
                break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.monotonic() < deadline
                time.sleep(0.3)
        yield base, models
    finally:
        proc.terminate()
        proc.wait(30)
