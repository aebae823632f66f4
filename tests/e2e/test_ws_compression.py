"""permessage-deflate on both sockets: clients that negotiate it (``websockets`` does by
default) get JSON compressed and audio frames exactly as sent, so no audio frame grows
on the wire past the 1 MiB a default ``websockets`` client accepts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import websockets
from websockets.extensions.permessage_deflate import (
    ClientPerMessageDeflateFactory,
    PerMessageDeflate,
)
from websockets.frames import CTRL_OPCODES, Frame, Opcode

from tests.e2e.test_compat_vllm import VllmClient, compat_url, tiny_samples
from tests.serving import RunningServer, run_server
from voiceserver.config import Limits, ServerConfig, load_model_config

CLIENT_MAX_SIZE = 1 << 20
"""What a ``websockets`` client (vllm-omni's streaming example's) accepts by default."""
RATE = 48000


@pytest.fixture(scope="module")
def long_sentences() -> Iterator[RunningServer]:
    """The tiny model (incompressible noise) with sentences long enough for a PCM file
    over 1 MiB at 48 kHz (max_chars 1000 instead of 400)."""
    config = load_model_config("tiny")
    config = replace(config, segmenter=replace(config.segmenter, max_chars=1000))
    with run_server(config, ServerConfig(limits=Limits(max_text_chars=4000))) as server:
        yield server


async def test_a_full_1mib_frame_reaches_a_default_client(long_sentences: RunningServer) -> None:
    """vllm-omni's streaming client: ``websockets.connect(url)`` as it is (compression
    on, 1 MiB messages). Deflate grew a full frame of noise to 1,051,142 bytes (1009)."""
    text = "noisy words " * 50  # 600 characters: 1.15 MB of PCM at 48 kHz
    async with websockets.connect(compat_url(long_sentences)) as ws:
        assert ws.protocol.max_message_size == CLIENT_MAX_SIZE
        assert "permessage-deflate" in ws.response.headers["Sec-WebSocket-Extensions"]
        client = VllmClient(ws)
        await client.send(
            type="session.config", response_format="pcm", sample_rate=RATE, split_granularity="none"
        )
        utt = await client.speak([text])
    [sentence] = utt.sentences
    assert [len(frame) for frame in sentence.audio][0] == CLIENT_MAX_SIZE
    assert len(sentence.data) == 2 * tiny_samples(text.strip(), RATE) > CLIENT_MAX_SIZE


class _Seen:
    def __init__(self) -> None:
        self.frames: list[tuple[Opcode, bool, int]] = []
        """(opcode, compressed, wire bytes) of every data frame received."""


class _RecordingDeflate(PerMessageDeflate):
    seen: _Seen

    def decode(self, frame: Frame, *, max_size: int | None = None) -> Frame:
        if frame.opcode not in CTRL_OPCODES:
            self.seen.frames.append((frame.opcode, frame.rsv1, len(frame.data)))
        return super().decode(frame, max_size=max_size)


class _RecordingFactory(ClientPerMessageDeflateFactory):
    """websockets' own client extension, noting each frame as it arrives on the wire."""

    def __init__(self, seen: _Seen) -> None:
        super().__init__(client_max_window_bits=True)
        self.seen = seen

    def process_response_params(self, params: Any, accepted: Any) -> PerMessageDeflate:
        ext = super().process_response_params(params, accepted)
        recording = _RecordingDeflate(
            ext.remote_no_context_takeover,
            ext.local_no_context_takeover,
            ext.remote_max_window_bits,
            ext.local_max_window_bits,
        )
        recording.seen = self.seen
        return recording


@pytest.mark.parametrize("encoding", ["pcm_s16le", "opus"])
async def test_native_socket_sends_audio_uncompressed_and_json_compressed(
    tiny_server: RunningServer, encoding: str
) -> None:
    seen = _Seen()
    async with websockets.connect(
        tiny_server.ws, extensions=[_RecordingFactory(seen)], compression=None
    ) as ws:
        await ws.recv()  # session.created
        fmt = {"encoding": encoding}
        await ws.send(
            json.dumps({"type": "context.create", "context_id": "a", "output_format": fmt})
        )
        await ws.send(
            json.dumps({"type": "text.append", "context_id": "a", "text": "Hello there."})
        )
        await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
        audio = 0
        while True:
            data = await ws.recv()
            if isinstance(data, bytes):
                audio += len(data)
            elif json.loads(data)["type"] == "context.done":
                break
    binary = [f for f in seen.frames if f[0] is Opcode.BINARY]
    text = [f for f in seen.frames if f[0] is Opcode.TEXT]
    assert binary and text
    assert not any(compressed for _, compressed, _ in binary)
    assert sum(size for _, _, size in binary) == audio  # on the wire as sent
    assert all(compressed for _, compressed, _ in text)


async def test_vllm_socket_sends_audio_uncompressed(tiny_server: RunningServer) -> None:
    seen = _Seen()
    client = VllmClient(
        await websockets.connect(
            compat_url(tiny_server), extensions=[_RecordingFactory(seen)], compression=None
        )
    )
    await client.send(type="session.config", response_format="flac")
    [sentence] = (await client.speak(["A file of flac."])).sentences
    await client.close()
    binary = [f for f in seen.frames if f[0] is Opcode.BINARY]
    assert [size for _, _, size in binary] == [len(frame) for frame in sentence.audio]
    assert not any(compressed for _, compressed, _ in binary)
    assert all(compressed for opcode, compressed, _ in seen.frames if opcode is Opcode.TEXT)
