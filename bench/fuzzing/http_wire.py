"""Playing the front-door probes (:mod:`bench.fuzzing.http_front`) over raw sockets
and judging the answers: every request answered, in order, with a status and error
code its verdict allows; never a 500; the connection closed where the verdict says
so (a 431, HTTP/1.0). Findings use the input and close kinds of the report, so the
existing oracles' tests cover them; their ``frames`` show the request as sent."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from urllib.parse import urlsplit

from bench.fuzzing.conn import Host
from bench.fuzzing.http_front import FrontProbe, Request
from bench.fuzzing.report import Finding

ANSWER_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 5.0
ENDPOINT = "http"


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    code: str | None
    """``error.code`` of a JSON error body."""


def show(data: bytes) -> str:
    text = data[:300].decode("latin-1")
    return text + (f" ... ({len(data)} bytes)" if len(data) > 300 else "")


async def _read_answer(reader: asyncio.StreamReader) -> Answer | None:
    line = await reader.readline()
    if not line:
        return None
    status = int(line.split(b" ", 2)[1])
    headers: dict[str, str] = {}
    while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if status == 101 or status in (204, 304):
        body = b""
    elif "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    else:
        body = await reader.read()
    return Answer(status, _error_code(body))


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while size := int((await reader.readline()).split(b";")[0], 16):
        body += await reader.readexactly(size)
        await reader.readline()
    await reader.readline()
    return bytes(body)


def _error_code(body: bytes) -> str | None:
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    return error.get("code") if isinstance(error, dict) else None


async def _write(writer: asyncio.StreamWriter, data: bytes) -> None:
    with contextlib.suppress(OSError):
        writer.write(data)
        await writer.drain()


async def play_front(run: Host, probes: tuple[FrontProbe, ...]) -> list[Finding]:
    """Play a barrage's probes one after another; the findings."""
    found: list[Finding] = []
    for probe in probes:
        found += await play_probe(run, probe)
    return found


async def play_probe(run: Host, probe: FrontProbe) -> list[Finding]:
    parts = urlsplit(run.facts.http)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    data = b"".join(r.data for r in probe.requests)
    sending = asyncio.create_task(_write(writer, data))
    run.report.sent[ENDPOINT] += len(probe.requests)
    run.report.families[probe.family] += 1
    frames = [show(r.data) for r in probe.requests]
    found: list[Finding] = []
    try:
        for index, request in enumerate(probe.requests):
            try:
                answer = await asyncio.wait_for(_read_answer(reader), ANSWER_TIMEOUT_S)
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
                answer, why = None, repr(exc)
            else:
                why = "the connection ended"
            if answer is None:
                detail = f"request {index + 1} of {len(probe.requests)} got no answer ({why})"
                found.append(_finding("no_answer", request, detail, frames))
                return found
            found += _judge(request, answer, frames)
            if request.upgrade and answer.status == 101:
                return found  # the rest would be WebSocket frames
            if answer.status >= 400:
                run.report.errors_by_code[answer.code or f"http_{answer.status}"] += 1
        if probe.last_closes and not await _ends(reader):
            detail = f"left open after {CLOSE_TIMEOUT_S:g} s; the answer must close it"
            found.append(_finding("unexpected_close", probe.requests[-1], detail, frames))
        return found
    finally:
        sending.cancel()
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def _judge(request: Request, answer: Answer, frames: list[str]) -> list[Finding]:
    expect = request.expect
    if answer.status >= 500:
        detail = f"HTTP {answer.status} ({answer.code}) for {frames_line(request)}"
        return [_finding("internal_error", request, detail, frames)]
    if answer.status not in expect.statuses:
        detail = (
            f"HTTP {answer.status} ({answer.code}), expected one of {sorted(expect.statuses)}"
            f" for {frames_line(request)}"
        )
        return [_finding("unexpected_error", request, detail, frames)]
    if expect.codes and answer.code is not None and answer.code not in expect.codes:
        detail = f"code {answer.code!r}, expected {sorted(expect.codes)}"
        return [_finding("unexpected_error", request, detail, frames)]
    return []


def frames_line(request: Request) -> str:
    return request.data.split(b"\r\n", 1)[0].decode("latin-1")


async def _ends(reader: asyncio.StreamReader) -> bool:
    try:
        rest = await asyncio.wait_for(reader.read(1), CLOSE_TIMEOUT_S)
    except TimeoutError:
        return False
    except OSError:
        return True
    return rest == b""


def _finding(kind: str, request: Request, detail: str, frames: list[str]) -> Finding:
    return Finding(ENDPOINT, kind, request.label, detail, f"{kind}:{request.label}", frames)
