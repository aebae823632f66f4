"""A chat-completions server on loopback that streams a fixed reply the way OpenAI's
API does (SSE ``chat.completion.chunk`` events, then ``data: [DONE]``), with a delay
between chunks and an optional gate the last chunk waits for."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class LLMScript:
    """What the fake LLM answers."""

    pieces: list[str]
    """The reply's content deltas, in order."""
    delay_s: float = 0.05
    """Pause before each chunk."""
    hold_last: Callable[[], bool] | None = None
    """Polled before the last content chunk: it is sent once this returns True (or
    after ``hold_timeout_s``)."""
    hold_timeout_s: float = 20.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    """Bodies of the requests received."""
    last_chunk_sent_at: float | None = None


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    body = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1764547200,
        "model": "test-llm",
        "system_fingerprint": None,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n"


def build_app(script: LLMScript) -> Starlette:
    async def events() -> AsyncIterator[str]:
        yield _chunk({"role": "assistant", "content": ""})
        for i, piece in enumerate(script.pieces):
            await asyncio.sleep(script.delay_s)
            if i == len(script.pieces) - 1 and script.hold_last is not None:
                deadline = time.monotonic() + script.hold_timeout_s
                while not script.hold_last() and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
            yield _chunk({"content": piece})
        script.last_chunk_sent_at = time.monotonic()
        yield _chunk({}, "stop")
        yield "data: [DONE]\n\n"

    async def completions(request: Request) -> Response:
        body = await request.json()
        script.requests.append(body)
        if body.get("model") != "test-llm":
            return JSONResponse(
                {"error": {"message": f"The model `{body.get('model')}` does not exist."}},
                status_code=404,
            )
        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


@contextlib.contextmanager
def run_llm_server(script: LLMScript) -> Iterator[str]:
    """Serve the script; yields the base URL (``http://127.0.0.1:PORT/v1``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(build_app(script), log_level="warning"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test LLM server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
