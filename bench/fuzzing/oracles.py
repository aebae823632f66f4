"""Ordering oracles (check 4): what may come in which order on each endpoint."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

Problem = tuple[str, str, str | None]
"""(what, detail, the context id it is about if any)."""


class Oracle:
    """Fed every frame of one connection in arrival order; collects problems."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def problem(self, what: str, detail: str, context_id: str | None = None) -> None:
        self.problems.append((what, detail, context_id))

    def message(self, msg: dict[str, Any]) -> None:
        raise NotImplementedError

    def frame(self, data: bytes) -> None:
        raise NotImplementedError


class ContextOrder(Oracle):
    """The native socket's order: ``context.created`` before anything else about a
    context, a stream not reused before its context was seen to end, ``seq`` counting up."""

    def __init__(self, keep_audio: bool = False) -> None:
        super().__init__()
        self.live: dict[str, int] = {}
        self.owner: dict[int, str] = {}
        self.next_seq: dict[int, int] = {}
        self.final: set[int] = set()
        self.ended_early: set[str] = set()
        self.zombies: dict[str, int] = {}
        """Contexts announced after their own end was reported: already counted as a
        problem, so nothing more about them is (context id -> stream)."""
        self.keep_audio = keep_audio
        self.audio: dict[str, bytearray] = {}

    def message(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        cid = msg.get("context_id")
        if kind == "context.created":
            stream = msg.get("stream")
            if not isinstance(cid, str) or not isinstance(stream, int):
                self.problem("malformed context.created", json.dumps(msg)[:200], None)
                return
            if cid in self.ended_early:
                self.ended_early.discard(cid)
                self.zombies[cid] = stream
                return
            self.zombies.pop(cid, None)
            if cid in self.live:
                self.problem("context.created twice", f"{cid!r} announced again while live", cid)
            elif stream in self.owner:
                self.problem(
                    "stream reused before its context ended",
                    f"stream {stream} announced for {cid!r} while {self.owner[stream]!r} "
                    "had not been seen to end",
                    cid,
                )
            self.live[cid] = stream
            self.owner[stream] = cid
            self.next_seq[stream] = 0
            self.final.discard(stream)
        elif kind in ("context.done", "context.cancelled"):
            # A zombie got its end already: this one is about a new context of that id.
            if isinstance(cid, str):
                self.zombies.pop(cid, None)
            if not isinstance(cid, str) or cid not in self.live:
                self.problem(f"{kind} before context.created", f"{kind} for {cid!r}, not live", cid)
                if isinstance(cid, str):
                    self.ended_early.add(cid)
                return
            stream = self.live.pop(cid)
            self.owner.pop(stream, None)
        elif isinstance(cid, str) and cid in self.zombies:
            return
        elif kind in ("context.flushed", "timestamps", "audio") or (
            kind == "warning" and cid is not None
        ):
            if cid not in self.live:
                self.problem(f"{kind} before context.created", f"{kind} for {cid!r}, not live", cid)
            elif kind == "audio" and self.keep_audio:
                self.audio.setdefault(cid, bytearray()).extend(
                    base64.b64decode(msg.get("audio", ""))
                )

    def frame(self, data: bytes) -> None:
        if len(data) < 8:
            self.problem("short audio frame", f"{len(data)} bytes", None)
            return
        version, flags, stream, seq = struct.unpack_from("<BBHI", data)
        if version != 1:
            self.problem("audio frame of another version", f"version {version}", None)
        cid = self.owner.get(stream)
        if cid is None and stream in self.zombies.values():
            return
        if cid is None:
            self.problem(
                "audio for a stream no live context owns", f"stream {stream} seq {seq}", None
            )
            return
        if stream in self.final:
            self.problem("audio after the context's last frame", f"stream {stream} seq {seq}", cid)
        if seq != self.next_seq[stream]:
            self.problem(
                "seq out of order",
                f"stream {stream}: seq {seq}, expected {self.next_seq[stream]}",
                cid,
            )
        self.next_seq[stream] = seq + 1
        if flags & 2:
            self.final.add(stream)
        if self.keep_audio:
            self.audio.setdefault(cid, bytearray()).extend(data[8:])


class SentenceOrder(Oracle):
    """The vllm-omni socket's order: audio.start, audio, audio.done; session.done after."""

    def __init__(self) -> None:
        super().__init__()
        self.current: tuple[Any, Any] | None = None
        self.next_utterance = 0

    def message(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        index = (msg.get("utterance_index"), msg.get("sentence_index"))
        if kind == "audio.start":
            if self.current is not None:
                self.problem(
                    "audio.start inside another sentence", f"{index} inside {self.current}"
                )
            if index[0] != self.next_utterance:
                self.problem(
                    "audio.start of the wrong utterance",
                    f"{index}, open utterance {self.next_utterance}",
                )
            self.current = index
        elif kind == "audio.done":
            if self.current != index:
                self.problem("audio.done without its audio.start", f"{index}, open {self.current}")
            self.current = None
        elif kind == "session.done":
            if self.current is not None:
                self.problem("session.done inside a sentence", f"inside {self.current}")
            if index[0] != self.next_utterance:
                self.problem(
                    "session.done out of order",
                    f"utterance {index[0]}, expected {self.next_utterance}",
                )
            self.next_utterance = (
                index[0] if isinstance(index[0], int) else self.next_utterance
            ) + 1

    def frame(self, data: bytes) -> None:
        if self.current is None:
            self.problem("binary audio outside audio.start .. audio.done", f"{len(data)} bytes")
