"""A client that floods a server with messages, reconnecting whenever it is closed.

    python -m bench.flood ws://127.0.0.1:8000/v1/audio/speech/ws --kind text --seconds 20

Kinds: ``text`` (``text.append`` to one context), ``create_cancel`` (a context created
and cancelled, over and over), ``bad_json`` (malformed JSON), ``vllm`` (messages the
vllm-omni socket refuses, on ``/v1/audio/speech/stream``). It reads (and drops)
whatever the server sends, as an attacker who wants to stay connected would. At the
end it prints one JSON line: messages sent, connections opened, upgrades refused
(by status), closes (by code).

Used by ``tests/e2e/test_floods.py`` (a bystander's first audio while one client
floods) and by hand against a running server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import websockets

KINDS = ("text", "create_cancel", "bad_json", "vllm")
YIELD_EVERY = 64
"""Messages sent between two turns of the reader."""


def messages(kind: str) -> Iterator[str]:
    if kind == "text":
        yield json.dumps({"type": "context.create", "context_id": "f"})
        while True:
            yield '{"type":"text.append","context_id":"f","text":"Hi there. ","flush":true}'
    elif kind == "create_cancel":
        n = 0
        while True:
            n += 1
            yield f'{{"type":"context.create","context_id":"c{n}"}}'
            yield f'{{"type":"context.cancel","context_id":"c{n}"}}'
    elif kind == "bad_json":
        while True:
            yield '{"type": "text.append", '
    elif kind == "vllm":
        yield '{"type": "session.config"}'
        while True:
            yield '{"type": "input.text", "text": 5}'
    else:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}")


async def _drain(ws: websockets.ClientConnection) -> None:
    try:
        async for _ in ws:
            pass
    except websockets.ConnectionClosed:
        pass


async def flood(
    url: str, kind: str, seconds: float, connect: dict[str, Any], until_refused: bool = False
) -> dict[str, Any]:
    """Flood for ``seconds`` (or until SIGTERM); with ``until_refused``, stop sooner once
    the server has both closed a connection for its rate (1008) and refused a reconnect
    at the door (429)."""
    stats: dict[str, Any] = {"sent": 0, "connections": 0, "refused": Counter(), "closed": Counter()}
    deadline = time.monotonic() + seconds
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    while time.monotonic() < deadline and not stop.is_set():
        try:
            ws = await websockets.connect(url, max_size=None, open_timeout=10, **connect)
        except websockets.InvalidStatus as exc:
            stats["refused"][str(exc.response.status_code)] += 1
            if until_refused and stats["refused"]["429"] and stats["closed"]["1008"]:
                break
            continue
        except (OSError, TimeoutError, websockets.InvalidHandshake):
            stats["refused"]["other"] += 1
            await asyncio.sleep(0.01)
            continue
        stats["connections"] += 1
        reader = asyncio.create_task(_drain(ws))
        try:
            for message in messages(kind):
                if time.monotonic() >= deadline or stop.is_set():
                    break
                await ws.send(message)
                stats["sent"] += 1
                if not stats["sent"] % YIELD_EVERY:
                    await asyncio.sleep(0)  # let the reader take what the server says
        except websockets.ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else "none"
            stats["closed"][str(code)] += 1
        finally:
            reader.cancel()
            await ws.close()
    return {**stats, "refused": dict(stats["refused"]), "closed": dict(stats["closed"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--kind", choices=KINDS, default="text")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--key", help="send this bearer key")
    parser.add_argument("--source", help="connect from this local address (e.g. 127.0.0.2)")
    parser.add_argument(
        "--until-refused",
        action="store_true",
        help="stop once closed for the rate (1008) and refused a reconnect (429)",
    )
    args = parser.parse_args()
    connect: dict[str, Any] = {}
    if args.key:
        connect["additional_headers"] = {"authorization": f"Bearer {args.key}"}
    if args.source:
        connect["local_addr"] = (args.source, 0)
    stats = asyncio.run(flood(args.url, args.kind, args.seconds, connect, args.until_refused))
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    main()
