"""Loopback HTTP servers for fetch tests: one that drips its headers, one that serves a file.

:class:`DripServer` answers every request with a status line and then one header byte
every ``interval_s``, forever: a client that bounds each read, not the whole fetch,
waits on it for good. It records when each connection opened and when the client
closed it, so a test can tell a fetch that was cancelled from one left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class DripServer:
    interval_s: float = 2.0
    port: int = 0
    opened: list[float] = field(default_factory=list)
    closed: list[float] = field(default_factory=list)
    """monotonic times at which a client closed its connection."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/drip.wav"

    @property
    def open_now(self) -> int:
        return len(self.opened) - len(self.closed)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened.append(time.monotonic())
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nX-Drip: ")
            while True:
                writer.write(b"a")
                await writer.drain()
                try:
                    if not await asyncio.wait_for(reader.read(1024), self.interval_s):
                        break  # the client closed its end
                except TimeoutError:
                    pass
        except (ConnectionError, asyncio.IncompleteReadError, OSError, asyncio.CancelledError):
            pass
        finally:
            self.closed.append(time.monotonic())
            writer.close()


@contextlib.contextmanager
def drip_server(interval_s: float = 2.0) -> Iterator[DripServer]:
    drip = DripServer(interval_s)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: asyncio.Future[None] | None = None

    async def main() -> None:
        nonlocal stop
        stop = loop.create_future()
        server = await asyncio.start_server(drip._serve, "127.0.0.1", 0)
        drip.port = server.sockets[0].getsockname()[1]
        ready.set()
        async with server:
            await stop
        # Drop the connections still dripping (a server that failed to close them).
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield drip
    finally:
        if stop is not None:
            loop.call_soon_threadsafe(stop.set_result, None)
        thread.join(5)


@dataclass
class FileServer:
    port: int = 0
    gets: int = 0

    def url(self, path: str = "/ref.wav") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextlib.contextmanager
def file_server(body: bytes) -> Iterator[FileServer]:
    """``GET /ref.wav`` -> ``body`` (counting the GETs); ``/redirect`` -> 302 there."""
    served = FileServer()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            served.gets += 1
            if self.path == "/redirect":
                self.send_response(302)
                self.send_header("Location", "/ref.wav")
                self.end_headers()
                return
            self.send_response(200 if self.path == "/ref.wav" else 404)
            self.send_header("Content-Type", "audio/wav")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        httpd.shutdown()
        httpd.server_close()
