"""The bystander (check 3): a well-behaved session that speaks the same words with the
same settings every time, so its audio during a barrage can be compared byte for byte
with its audio on an idle server."""

from __future__ import annotations

import asyncio
import json
import struct

import websockets

from bench.fuzzing.facts import ServerFacts
from bench.fuzzing.oracles import ContextOrder
from bench.fuzzing.report import Finding
from bench.fuzzing.sockets import connect

BYSTANDER_TEXT = (
    "Every fuzz run needs a calm voice in the corner, reading the same words "
    "each time, while the others throw garbage at the server."
)


def _trouble(label: str, detail: str, signature: str) -> Finding:
    return Finding("bystander", "bystander_error", label, detail, signature)


async def speak(facts: ServerFacts, context_id: str) -> tuple[bytes | None, list[Finding]]:
    """One round: one context, the fixed text streamed word by word; its audio (None:
    no connection) and what went wrong."""
    findings: list[Finding] = []
    try:
        ws = await connect(facts.ws_url)
    except (OSError, TimeoutError, websockets.WebSocketException) as exc:
        return None, [_trouble("connect", f"could not connect: {exc}", "connect")]
    order = ContextOrder(keep_audio=True)
    done = asyncio.Event()

    async def read() -> None:
        try:
            async for data in ws:
                if isinstance(data, bytes):
                    order.frame(data)
                    continue
                msg = json.loads(data)
                order.message(msg)
                if msg.get("type") == "error":
                    findings.append(_trouble(msg.get("code", "?"), json.dumps(msg)[:300], "error"))
                if msg.get("context_id") == context_id and msg.get("type") in (
                    "context.done",
                    "context.cancelled",
                    "error",
                ):
                    done.set()
        except websockets.ConnectionClosed:
            pass
        finally:
            done.set()

    reader = asyncio.create_task(read())
    try:
        create = {
            "type": "context.create",
            "context_id": context_id,
            "voice": facts.voices[0],
            "output_format": {"encoding": "pcm_s16le", "sample_rate": facts.bystander_rate},
            "seed": 1234,
            "temperature": 0,
            "event_id": f"{context_id}-create",
        }
        await ws.send(json.dumps(create))
        words = BYSTANDER_TEXT.split(" ")
        for i, word in enumerate(words):
            piece = word if i == len(words) - 1 else word + " "
            await ws.send(
                json.dumps({"type": "text.append", "context_id": context_id, "text": piece})
            )
            await asyncio.sleep(0.003)
        await ws.send(json.dumps({"type": "context.end", "context_id": context_id}))
        try:
            await asyncio.wait_for(done.wait(), 60)
        except TimeoutError:
            findings.append(_trouble("timeout", "no context.done within 60 s", "timeout"))
    except websockets.ConnectionClosed as exc:
        findings.append(_trouble("closed", f"the bystander's socket closed: {exc}", "closed"))
    finally:
        await ws.close()
        await reader
    for what, detail, _ in order.problems:
        findings.append(
            Finding("bystander", "ordering", f"bystander: {what}", detail, f"ordering:{what}")
        )
    return bytes(order.audio.get(context_id, b"")), findings


def compare(reference: bytes | None, audio: bytes | None, when: str) -> Finding | None:
    """A finding when ``audio`` differs from the idle ``reference`` (None: not judged)."""
    if audio is None or reference is None or audio == reference:
        return None
    detail = f"{when}: {len(audio)} bytes vs {len(reference)} on an idle server"
    if len(audio) == len(reference) and len(audio) % 2 == 0:
        a = struct.unpack(f"<{len(audio) // 2}h", audio)
        b = struct.unpack(f"<{len(reference) // 2}h", reference)
        diffs = [abs(x - y) for x, y in zip(a, b, strict=True) if x != y]
        first = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
        detail += (
            f"; {len(diffs)} of {len(a)} samples differ (max |diff| {max(diffs)} LSB, "
            f"first at sample {first})"
        )
    return Finding("bystander", "bystander_audio", "bystander", detail, "bystander_audio")
