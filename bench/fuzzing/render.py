"""Message trees to frames: placeholders filled in, JSON written by hand (so it can hold
NaN, repeated keys and lone surrogates), then broken, padded or nested as asked."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bench.fuzzing.messages import (
    MISSING,
    Binary,
    Cid,
    Deep,
    EventId,
    Json,
    Mangled,
    Pairs,
    ProbeSpec,
    Raw,
    Sized,
)


def has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)


def _dump_str(text: str) -> str:
    # ensure_ascii writes lone surrogates as \\udXXX escapes; raw, they are not UTF-8.
    return json.dumps(text, ensure_ascii=has_surrogate(text))


@dataclass(frozen=True, slots=True)
class Rendered:
    spec: ProbeSpec
    frame: str | bytes
    event_id: str | None
    """The ``event_id`` written into the frame as a string, if any."""


class Renderer:
    def __init__(self, event_id: str, prefix: str) -> None:
        self.base_id = event_id
        self.prefix = prefix
        self.used_id: str | None = None

    def event_id(self, node: EventId) -> str:
        text = self.base_id
        if node.pad or node.tail:
            text += "~" + node.tail + "x" * node.pad
        self.used_id = text
        return text

    def cid(self, node: Cid) -> str:
        text = self.prefix + node.name
        if node.length:
            text += "x" * max(0, node.length - len(text) - len(node.tail))
        return text + node.tail

    def json(self, node: Any) -> str:
        if isinstance(node, Raw):
            return node.text
        if isinstance(node, EventId):
            return _dump_str(self.event_id(node))
        if isinstance(node, Cid):
            return _dump_str(self.cid(node))
        if isinstance(node, str):
            return _dump_str(node)
        if isinstance(node, Pairs):
            items: Iterable[tuple[str, Any]] = node.items
        elif isinstance(node, dict):
            items = node.items()
        elif isinstance(node, list | tuple):
            return "[" + ",".join(self.json(v) for v in node) + "]"
        else:
            return json.dumps(node)
        parts = [f"{_dump_str(k)}:{self.json(v)}" for k, v in items if v is not MISSING]
        return "{" + ",".join(parts) + "}"

    def deep(self, shape: str, depth: int) -> str:
        arrays = "[" * depth + "]" * depth
        eid = _dump_str(self.event_id(EventId()))
        cid = _dump_str(self.cid(Cid()))
        if shape == "array":
            return arrays
        if shape == "object":
            return '{"a":' * depth + "1" + "}" * depth
        if shape == "mixed":
            return '[{"a":' * depth + "1" + "}]" * depth
        if shape == "unknown-field":
            return f'{{"type":"keepalive","event_id":{eid},"z":{arrays}}}'
        if shape == "text":
            return f'{{"type":"text.append","event_id":{eid},"context_id":{cid},"text":{arrays}}}'
        if shape == "embedding":
            return (
                f'{{"type":"context.create","event_id":{eid},"context_id":{cid},'
                f'"speaker_embedding":{arrays}}}'
            )
        if shape == "config-field":
            return f'{{"type":"session.config","z":{arrays}}}'
        if shape == "input-text":
            return f'{{"type":"input.text","text":{arrays}}}'
        raise ValueError(f"unknown deep shape {shape!r}")

    def render(self, spec: ProbeSpec) -> Rendered:
        body = spec.body
        frame: str | bytes
        if isinstance(body, Json):
            frame = self.json(body.node)
        elif isinstance(body, Mangled):
            frame = _mangle(self.json(body.node), body.how, body.arg)
        elif isinstance(body, Sized):
            empty = self.json({**body.node, body.key: ""})
            need = max(0, body.total - len(empty.encode()))
            unit_bytes = len(body.unit.encode())
            count = need // unit_bytes
            fill = body.unit * count + "x" * (need - count * unit_bytes)
            frame = self.json({**body.node, body.key: fill})
        elif isinstance(body, Deep):
            frame = self.deep(body.shape, body.depth)
        elif isinstance(body, Binary):
            frame = _binary(body.size, body.kind)
        else:
            frame = body.text
        return Rendered(spec, frame, self.used_id)


def _mangle(text: str, how: str, arg: int) -> str:
    if how == "truncate":
        return text[: max(1, min(len(text) - 1, len(text) * arg // 1000))]
    if how == "trail":
        return text + ["x", "}", "{}", " 1", ",", "\x00"][arg % 6]
    if how == "lead":
        return ["\ufeff", "x", "[", "//c\n", "/*c*/"][arg % 5] + text
    if how == "quotes":
        return text.replace('"', "'")
    if how == "comma":
        return text[:-1] + ",}"
    if how == "whitespace":
        return " \n\t\r" + text + "\r\n\t "
    raise ValueError(f"unknown mangling {how!r}")


def _binary(size: int, kind: str) -> bytes:
    if kind == "audio":
        header = struct.pack("<BBHI", 1, 2, 0, 0)
        return (header + bytes(max(0, size - len(header))))[: max(size, 0)]
    if kind == "zeros":
        return bytes(size)
    return bytes((i * 73 + 41) % 256 for i in range(size))


def show(frame: str | bytes, limit: int = 240) -> str:
    """A frame as a report shows it: short ones whole, long ones cut with their size."""
    if isinstance(frame, bytes):
        head = frame[:16].hex()
        return f"<binary frame, {len(frame)} bytes: {head}{'...' if len(frame) > 16 else ''}>"
    text = json.dumps(frame, ensure_ascii=True)[1:-1] if _needs_escape(frame) else frame
    if len(text) <= limit:
        return text
    return f"{text[: limit - 70]} ... {text[-50:]}  [{len(frame.encode('utf-8', 'surrogatepass'))} bytes]"


def _needs_escape(text: str) -> bool:
    return any(ord(ch) < 0x20 or 0xD800 <= ord(ch) <= 0xDFFF for ch in text)
