"""One session on vllm-omni's speech socket, as its clients run it (for e2e tests)."""

from __future__ import annotations

import json

import websockets

from tests.serving import RunningServer


async def vllm_session(
    server: RunningServer, config: dict, text: str, headers: dict[str, str] | None = None
) -> bytes:
    """``session.config`` with ``config``, ``text`` in one ``input.text``, then
    ``input.done``: the session's audio (a WAV stream); an error message fails.
    ``headers`` go with the upgrade (``Authorization``)."""
    url = f"ws://{server.host}:{server.port}/v1/audio/speech/stream"
    async with websockets.connect(url, max_size=None, additional_headers=headers) as ws:
        await ws.send(json.dumps({"type": "session.config", **config}))
        await ws.send(json.dumps({"type": "input.text", "text": text}))
        await ws.send(json.dumps({"type": "input.done"}))
        audio, types = b"", []
        while True:
            message = await ws.recv()
            if isinstance(message, bytes):
                audio += message
                continue
            data = json.loads(message)
            types.append(data["type"])
            assert data["type"] != "error", data
            if data["type"] == "session.done":
                break
    assert types[0] == "audio.start" and "audio.done" in types
    return audio
