"""What permessage-deflate costs and saves on the frames this server really sends.

The server is started (Piper by default) and asked for speech over both sockets by
clients that do not negotiate compression, so every frame is recorded as the
application sent it: the native socket (PCM and Opus binary frames, JSON events) and
the vllm-omni socket (streamed PCM and Ogg/Opus, FLAC files in frames of at most
1 MiB, base64 PCM in ``audio.chunk`` JSON, JSON events). Each socket's frames are
then run, in the order they were sent, through the server's compressor with
uvicorn's settings (12-bit window, memLevel 5, context takeover), three ways:

- ``deflate_all``: every data frame compressed (uvicorn's and websockets' default);
- ``text_only``: what the server does now (``voiceserver.transport.protocols.TextDeflate``:
  binary frames go out as they are);
- ``off``: no compression.

Two synthetic sockets are added: a FLAC file of 11 s of white noise at 48 kHz, cut into
frames of at most 1 MiB as the vllm-omni socket sends a file, and one frame of 1 MiB of
random bytes: what a codec's output tends to (dense audio compresses no better), where
deflate's overhead is largest (memLevel 5 emits a block every 2,048 bytes).

For each kind of frame the report gives the bytes before and after, the CPU time the
compressor took per MB of payload (the least of ``--repeats`` runs) and the largest
frame on the wire, against the 1 MiB that ``websockets`` clients accept by default.

    .venv/bin/python -m bench.ws_compression --out bench/results/ws-compression.json

bench/baselines/ws-compression.json is a run on the 2-core CPU machine (Piper).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
import zlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import websockets
from websockets.extensions.permessage_deflate import PerMessageDeflate
from websockets.frames import BINARY, TEXT, Frame, Opcode

from bench.spawn import spawn_server
from voiceserver.audio.containers import encode_whole_file
from voiceserver.transport.compat_audio import binary_frames
from voiceserver.transport.protocols import TextDeflate

CLIENT_MAX_SIZE = 1 << 20
"""What a ``websockets`` client accepts in one message unless told otherwise."""
SPEECH = (
    "Hello there, how are you today? I hope the weather is fine where you are. "
    "Your order shipped yesterday and should arrive on Thursday, before noon. "
    "If it does not, call us and we will send another one at once."
)
LONG = (
    "This is a rather long paragraph that a client sends in one piece and asks to hear"
    " without any split, so the server has to speak all of it as a single sentence and"
    " send it back as a single file. At forty eight thousand samples a second that file"
    " holds far more than one mebibyte of audio, which is the largest message that the"
    " websockets library accepts unless its client raises the limit."
)


@dataclass
class Recorded:
    """One socket's frames in the order they came: (kind, opcode, payload)."""

    socket: str
    frames: list[tuple[str, Opcode, bytes]] = field(default_factory=list)

    def add(self, kind: str, data: str | bytes) -> None:
        if isinstance(data, str):
            self.frames.append((kind, TEXT, data.encode()))
        else:
            self.frames.append((kind, BINARY, data))


async def _vllm(url: str, config: dict[str, Any], texts: list[str], audio_kind: str) -> Recorded:
    rec = Recorded("vllm")
    async with websockets.connect(url, compression=None, max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.config", **config}))
        for text in texts:
            await ws.send(json.dumps({"type": "input.text", "text": text}))
        await ws.send(json.dumps({"type": "input.done"}))
        while True:
            data = await asyncio.wait_for(ws.recv(), 120)
            if isinstance(data, bytes):
                rec.add(audio_kind, data)
                continue
            kind = json.loads(data)["type"]
            rec.add(audio_kind if kind == "audio.chunk" else "json events", data)
            if kind in ("session.done", "error"):
                return rec


async def _native(url: str, fmt: dict[str, Any], audio_kind: str) -> Recorded:
    rec = Recorded("native")
    async with websockets.connect(url, compression=None, max_size=None) as ws:
        rec.add("json events", await ws.recv())  # session.created
        await ws.send(
            json.dumps(
                {
                    "type": "context.create",
                    "context_id": "a",
                    "output_format": fmt,
                    "timestamps": "word",
                }
            )
        )
        for word in SPEECH.split(" "):
            await ws.send(
                json.dumps({"type": "text.append", "context_id": "a", "text": word + " "})
            )
        await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
        while True:
            data = await asyncio.wait_for(ws.recv(), 120)
            if isinstance(data, bytes):
                rec.add(audio_kind, data)
                continue
            rec.add("json events", data)
            if json.loads(data)["type"] in ("context.done", "error"):
                return rec


async def record(http: str) -> list[Recorded]:
    host = http.removeprefix("http://")
    vllm, native = f"ws://{host}/v1/audio/speech/stream", f"ws://{host}/v1/audio/speech/ws"
    words = [w + " " for w in SPEECH.split(" ")]
    stream = {"stream_audio": True}
    return [
        await _vllm(vllm, {"response_format": "pcm", **stream}, words, "pcm (binary)"),
        await _vllm(vllm, {"response_format": "opus", **stream}, words, "ogg/opus (binary)"),
        await _vllm(
            vllm,
            {"response_format": "flac", "sample_rate": 48000, "split_granularity": "none"},
            [LONG],
            "flac file (binary)",
        ),
        await _vllm(
            vllm, {"response_format": "pcm", "word_timestamps": True}, words, "pcm base64 (json)"
        ),
        await _native(native, {"encoding": "pcm_s16le"}, "pcm (binary)"),
        await _native(native, {"encoding": "opus"}, "opus packets (binary)"),
    ]


def noise_flac(seconds: float = 11.0, rate: int = 48000) -> Recorded:
    """A FLAC file of white noise in the vllm socket's frames (synthetic: see above)."""
    noise = np.random.default_rng(0).integers(-32768, 32768, int(seconds * rate), dtype="<i2")
    rec = Recorded("vllm (synthetic)")
    for frame in binary_frames(encode_whole_file(noise.tobytes(), rate, "flac")):
        rec.add("flac file of noise (binary, synthetic)", frame)
    return rec


def incompressible(size: int = CLIENT_MAX_SIZE) -> Recorded:
    """One binary frame of ``size`` random bytes (synthetic: see above)."""
    rec = Recorded("vllm (synthetic)")
    rec.add("1 MiB of random bytes (binary, synthetic)", np.random.default_rng(1).bytes(size))
    return rec


POLICIES: dict[str, Callable[[], PerMessageDeflate] | None] = {
    # The settings uvicorn negotiates (websockets' defaults for a server).
    "deflate_all": lambda: PerMessageDeflate(False, False, 12, 12, {"memLevel": 5}),
    "text_only": lambda: TextDeflate(False, False, 12, 12, {"memLevel": 5}),
    "off": None,
}


@dataclass
class Tally:
    frames: int = 0
    payload: int = 0
    wire: int = 0
    cpu_s: float = 0.0
    max_payload: int = 0
    max_wire: int = 0

    def row(self) -> dict[str, Any]:
        mb = self.payload / 1e6
        return {
            "frames": self.frames,
            "payload_bytes": self.payload,
            "wire_bytes": self.wire,
            "wire_over_payload": round(self.wire / self.payload, 4) if self.payload else None,
            "bytes_saved": self.payload - self.wire,
            "cpu_ms_per_mb": round(1000 * self.cpu_s / mb, 3) if mb else None,
            "cpu_ms_total": round(1000 * self.cpu_s, 3),
            "max_payload_bytes": self.max_payload,
            "max_wire_bytes": self.max_wire,
            "frames_over_client_max_size": None,
        }


def run_policy(
    sockets: list[Recorded], make: Callable[[], PerMessageDeflate] | None
) -> dict[str, Tally]:
    tallies: dict[str, Tally] = defaultdict(Tally)
    for rec in sockets:
        ext = make() if make is not None else None  # one compressor per connection
        for kind, opcode, payload in rec.frames:
            t = tallies[kind]
            start = time.perf_counter()
            wire = payload if ext is None else ext.encode(Frame(opcode, payload)).data
            t.cpu_s += time.perf_counter() - start
            t.frames += 1
            t.payload += len(payload)
            t.wire += len(wire)
            t.max_payload = max(t.max_payload, len(payload))
            t.max_wire = max(t.max_wire, len(wire))
    return tallies


def measure(sockets: list[Recorded], repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, make in POLICIES.items():
        runs = [run_policy(sockets, make) for _ in range(repeats)]
        best = runs[0]
        for kind in best:
            best[kind].cpu_s = min(run[kind].cpu_s for run in runs)
        rows = {kind: tally.row() for kind, tally in sorted(best.items())}
        for kind, row in rows.items():
            row["frames_over_client_max_size"] = sum(
                1
                for rec in sockets
                for k, opcode, payload in rec.frames
                if k == kind and _wire_len(make, opcode, payload) > CLIENT_MAX_SIZE
            )
        total = Tally()
        for tally in best.values():
            total.frames += tally.frames
            total.payload += tally.payload
            total.wire += tally.wire
            total.cpu_s += tally.cpu_s
            total.max_wire = max(total.max_wire, tally.max_wire)
            total.max_payload = max(total.max_payload, tally.max_payload)
        rows["all frames"] = total.row()
        rows["all frames"]["frames_over_client_max_size"] = sum(
            r["frames_over_client_max_size"] for k, r in rows.items() if k != "all frames"
        )
        out[name] = rows
    return out


def _wire_len(make: Callable[[], PerMessageDeflate] | None, opcode: Opcode, payload: bytes) -> int:
    """A frame's wire size when it opens a connection's stream (a fresh compressor):
    the worst case for incompressible data, which no earlier context helps."""
    if make is None:
        return len(payload)
    return len(make().encode(Frame(opcode, payload)).data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="piper-joe", help="model config to serve")
    parser.add_argument("--repeats", type=int, default=5, help="compressor runs; the least CPU")
    parser.add_argument("--out", type=Path, default=Path("bench/results/ws-compression.json"))
    args = parser.parse_args()
    with spawn_server(args.config) as server:
        sockets = asyncio.run(record(server.http))
    sockets += [noise_flac(), incompressible()]
    report = {
        "what": "permessage-deflate on the server's own frames (uvicorn's settings)",
        "config": args.config,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "zlib": zlib.ZLIB_RUNTIME_VERSION,
        },
        "client_max_size": CLIENT_MAX_SIZE,
        "repeats": args.repeats,
        "policies": measure(sockets, args.repeats),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for policy, rows in report["policies"].items():
        print(policy)
        for kind, row in rows.items():
            print(
                f"  {kind:24} {row['payload_bytes']:>10} -> {row['wire_bytes']:>10}"
                f"  x{row['wire_over_payload']}  {row['cpu_ms_per_mb']} ms/MB"
                f"  max wire {row['max_wire_bytes']}  over 1 MiB: {row['frames_over_client_max_size']}"
            )


if __name__ == "__main__":
    main()
