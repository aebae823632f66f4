"""Text deltas of an OpenAI-compatible chat-completions stream (SSE), as they arrive.

Works with any server that speaks the format (OpenAI, vLLM, llama.cpp's server,
Ollama's /v1): ``POST {base}/chat/completions`` with ``stream: true`` answers
``text/event-stream`` events whose ``data:`` is a ``chat.completion.chunk`` JSON, and
``data: [DONE]`` at the end. The standard library does the HTTP in one reader thread,
so this needs no HTTP package and never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any


class ChatStreamError(Exception):
    """The LLM server refused the request or sent something that is not a chat stream."""


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One chat-completions request."""

    url: str
    """Base URL (``http://host:8000/v1``) or the full ``.../chat/completions`` URL."""
    model: str
    """The model name the LLM server knows."""
    messages: list[dict[str, str]]
    """``[{"role": ..., "content": ...}]`` in order."""
    api_key: str | None = None
    """Bearer key for the LLM server, if it needs one."""
    extra: dict[str, Any] = field(default_factory=dict)
    """More body fields (``temperature``, ``max_tokens``, ...), sent as given."""
    timeout_s: float = 60.0
    """Connect and per-read timeout."""

    @property
    def endpoint(self) -> str:
        base = self.url.rstrip("/")
        return base if base.endswith("/chat/completions") else f"{base}/chat/completions"

    def body(self) -> bytes:
        payload = {**self.extra, "model": self.model, "messages": self.messages, "stream": True}
        return json.dumps(payload).encode()


def sse_data(lines: Iterable[bytes]) -> Iterator[str]:
    """The ``data`` of each server-sent event (multi-line data joined with newlines);
    comments, ``event:``/``id:``/``retry:`` fields and empty events are skipped."""
    data: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def chunk_text(data: str) -> str | None:
    """``choices[0].delta.content`` of one chunk (None when it has no text); raises
    ChatStreamError for an ``error`` event or a chunk that is not JSON."""
    try:
        chunk = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ChatStreamError(
            f"the LLM stream sent a chunk that is not JSON: {data[:200]!r}"
        ) from exc
    if not isinstance(chunk, dict):
        raise ChatStreamError(f"the LLM stream sent a chunk that is not an object: {data[:200]!r}")
    if "error" in chunk:
        raise ChatStreamError(f"the LLM server reported an error: {chunk['error']}")
    choices = chunk.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return None
    delta = choices[0].get("delta") or {}
    content = delta.get("content") if isinstance(delta, dict) else None
    return content if isinstance(content, str) and content else None


def _read_stream(request: ChatRequest, put: Any, stop: threading.Event) -> None:
    """The reader thread: hands each delta (then None, or an exception) to ``put``."""
    http = urllib.request.Request(request.endpoint, data=request.body(), method="POST")
    http.add_header("Content-Type", "application/json")
    http.add_header("Accept", "text/event-stream")
    if request.api_key:
        http.add_header("Authorization", f"Bearer {request.api_key}")
    try:
        with urllib.request.urlopen(http, timeout=request.timeout_s) as response:
            for data in sse_data(response):
                if stop.is_set():
                    return
                if data.strip() == "[DONE]":
                    break
                if (text := chunk_text(data)) is not None:
                    put(text)
        put(None)
    except urllib.error.HTTPError as exc:
        detail = exc.read(500).decode("utf-8", "replace")
        put(ChatStreamError(f"{request.endpoint} answered HTTP {exc.code}: {detail}"))
    except (urllib.error.URLError, OSError) as exc:
        put(ChatStreamError(f"cannot read {request.endpoint}: {exc}"))
    except ChatStreamError as exc:
        put(exc)


async def chat_deltas(request: ChatRequest) -> AsyncIterator[str]:
    """Each text delta of the reply, as soon as the LLM server sends it."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | Exception | None] = asyncio.Queue()
    stop = threading.Event()

    def put(item: str | Exception | None) -> None:
        if not stop.is_set():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(queue.put_nowait, item)

    reader = threading.Thread(
        target=_read_stream, args=(request, put, stop), name="chat-stream", daemon=True
    )
    reader.start()
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        # The thread notices at its next event; it never touches the loop after this.
        stop.set()
