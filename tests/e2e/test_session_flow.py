"""Session-level behaviour: close drains, base64 transport, session defaults."""

from __future__ import annotations

import base64

import pytest
import websockets

from tests.serving import RunningServer
from tests.wsclient import Client

TEXT = "Closing time."
SAMPLES = (len(TEXT) + 3) * 480


async def test_session_close_finishes_contexts_then_closes_1000(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    for cid in ("a", "b"):
        await client.send(type="text.append", context_id=cid, text=TEXT)
    await client.send(type="session.close")
    with pytest.raises(websockets.ConnectionClosed) as closed:
        while True:
            await client.next_any()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
    done = {m["context_id"] for m in client.got.of_type("context.done")}
    assert done == {"a", "b"}
    for cid in ("a", "b"):
        assert len(client.got.audio[cid]) == SAMPLES * 2


async def test_base64_audio_transport(tiny_server: RunningServer) -> None:
    client = await Client.connect(tiny_server.ws)
    await client.send(type="session.update", audio_transport="base64")
    await client.until("session.updated")
    await client.send(type="text.append", context_id="b64", text=TEXT)
    await client.send(type="context.end", context_id="b64")
    await client.until("context.done", "b64")
    await client.close()
    assert not client.got.frames  # no binary frames at all
    audio = [m for m in client.got.messages if m["type"] == "audio"]
    assert [m["seq"] for m in audio] == list(range(len(audio)))
    pcm = b"".join(base64.b64decode(m["audio"]) for m in audio)
    assert len(pcm) == SAMPLES * 2


async def test_session_defaults_apply_to_new_contexts(tiny_server: RunningServer) -> None:
    async def run(**update: object) -> bytes:
        client = await Client.connect(tiny_server.ws)
        if update:
            await client.send(type="session.update", **update)
            await client.until("session.updated")
        await client.send(type="text.append", context_id="d", text=TEXT)
        await client.send(type="context.end", context_id="d")
        await client.until("context.done", "d")
        await client.close()
        return bytes(client.got.audio["d"])

    default = await run()
    other_voice = await run(voice="tiny-b")
    at_16k = await run(output_format={"encoding": "pcm_s16le", "sample_rate": 16000})
    assert default != other_voice and len(default) == len(other_voice)
    assert len(at_16k) * 3 == len(default) * 2


async def test_query_defaults(tiny_server: RunningServer) -> None:
    client = await Client.connect(
        tiny_server.ws + "?voice=tiny-b&encoding=pcm_f32le&sample_rate=16000"
    )
    await client.send(type="text.append", context_id="q", text=TEXT)
    await client.send(type="context.end", context_id="q")
    await client.until("context.done", "q")
    await client.close()
    assert len(client.got.audio["q"]) == (len(TEXT) + 3) * 320 * 4
