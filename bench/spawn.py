"""Start ``voiceserver serve`` in a subprocess for a benchmark run, and stop it after."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from voiceclient.server_info import get_json

LOAD_GENERATOR_LIMITS = ("--limit", "max_client_share=1", "--limit", "max_messages_per_s=0")
"""Per-client limits lifted for a load generator: every session it opens comes from one
address, where real users would each be a client of their own."""


@dataclass(frozen=True, slots=True)
class SpawnedServer:
    url: str
    """The WebSocket URL of the speech endpoint."""
    http: str
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    """The server process (None where it was not started here)."""

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _healthy(http: str) -> bool:
    try:
        return get_json(f"{http}/health", timeout=1.0).get("status") == "ok"
    except (OSError, ValueError, AttributeError):
        return False


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@contextlib.contextmanager
def spawn_server(
    config: str | None,
    *,
    model: Path | None = None,
    port: int | None = None,
    host: str = "127.0.0.1",
    options: tuple[str, ...] = (),
    args: tuple[str, ...] = (),
    start_timeout_s: float = 300.0,
    load_generator: bool = False,
) -> Iterator[SpawnedServer]:
    """Run ``voiceserver serve --config CONFIG`` (and/or ``--model DIR``, a checkpoint
    directory; without a config the server picks the one that fits it) until /health
    answers; stop it on exit. ``options`` are model options (``--option``); ``args`` go
    to ``serve`` as they are. ``load_generator``: the server's clients are one load
    generator standing for many users, so the per-client limits (share of the engine,
    message rate) are lifted (:data:`LOAD_GENERATOR_LIMITS`).

    Raises RuntimeError (with the end of the server's log) when it exits early or does
    not become healthy in time.
    """
    if config is None and model is None:
        raise ValueError("spawn_server needs a config, a checkpoint directory or both")
    port = port or free_port(host)
    http = f"http://{host}:{port}"
    command = [sys.executable, "-m", "voiceserver.cli", "serve"]
    if config is not None:
        command += ["--config", config]
    if model is not None:
        command += ["--model", str(model)]
    command += ["--host", host, "--port", str(port), "--log-level", "warning"]
    for option in options:
        command += ["--option", option]
    if load_generator:
        command += list(LOAD_GENERATOR_LIMITS)
    command += list(args)
    log_dir = Path(tempfile.mkdtemp(prefix="voiceserver-bench-"))
    log_path = log_dir / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + start_timeout_s
        while not _healthy(http):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the server exited with {proc.returncode} before it was ready:\n"
                    f"{_tail(log_path)}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the server did not answer {http}/health within {start_timeout_s:g} s:\n"
                    f"{_tail(log_path)}"
                )
            time.sleep(0.2)
        yield SpawnedServer(f"ws://{host}:{port}/v1/audio/speech/ws", http, log_path, proc)
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)  # uvicorn shuts down gracefully on SIGINT
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
