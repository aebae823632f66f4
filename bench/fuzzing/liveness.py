"""After the barrage (check 1): the server still answers ``/health``, and a fresh
session on each endpoint still works. Each check says whether it passed, and what it
found."""

from __future__ import annotations

import asyncio
import json

import websockets
from voiceclient.server_info import get_json

from bench.fuzzing.bystander import compare, speak
from bench.fuzzing.compat_conn import CompatConn
from bench.fuzzing.conn import Host
from bench.fuzzing.facts import ServerFacts
from bench.fuzzing.report import Finding

Check = tuple[bool, list[Finding]]


def _server(kind: str, label: str, detail: str, signature: str) -> Finding:
    return Finding("server", kind, label, detail, signature)


async def health(facts: ServerFacts) -> Check:
    try:
        answer = await asyncio.to_thread(get_json, f"{facts.http}/health", timeout=5.0)
    except (OSError, ValueError) as exc:
        return False, [
            _server("server_dead", "/health", f"/health did not answer: {exc!r}", "server_dead")
        ]
    return answer.get("status") == "ok", []


async def fresh_native(facts: ServerFacts, reference: bytes | None) -> Check:
    """The bystander once more: it must still get audio, the same as on an idle server."""
    audio, findings = await speak(facts, "after-the-barrage")
    if not audio:
        detail = "a fresh session got no audio after the barrage"
        return False, [*findings, _server("fresh_session", "ws", detail, "fresh")]
    mismatch = compare(reference, audio, "fresh session after the barrage")
    return True, [*findings, *([mismatch] if mismatch else [])]


async def fresh_compat(run: Host) -> Check:
    try:
        conn = await CompatConn.open(run, "fresh")
    except (OSError, TimeoutError, websockets.WebSocketException, RuntimeError) as exc:
        detail = f"could not open a session: {exc!r}"
        return False, [_server("fresh_session", "stream", detail, "fresh")]
    conn.counting = False
    try:
        await conn.ws.send(
            json.dumps({"type": "input.text", "text": "A fresh session after the barrage."})
        )
        ok = await conn.input_done()
        errors = [m for m, _ in conn.errors]
    finally:
        await conn.close()
    if not ok or errors:
        detail = f"a fresh session did not finish cleanly (errors: {errors[:2]})"
        return False, [_server("fresh_session", "stream", detail, "fresh")]
    return True, []
