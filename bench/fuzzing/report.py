"""Findings (oracle violations) and the report a run builds up."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bench.fuzzing.messages import Step


@dataclass
class Finding:
    """One oracle violation. ``signature`` is what a replay must show again to count
    as reproducing it; ``repro`` is the smallest message sequence that did."""

    endpoint: str
    kind: str
    label: str
    detail: str
    signature: str
    frames: list[str] = field(default_factory=list)
    repro: list[str] | None = None
    repro_note: str = ""
    culprit: str = ""
    """The label of the one message that reproduces it alone, when one does."""
    count: int = 1
    step: Step | None = field(default=None, repr=False)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.endpoint, self.kind, self.label)

    def to_json(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "kind": self.kind,
            "label": self.label,
            "detail": self.detail,
            "count": self.count,
            "repro": self.repro if self.repro is not None else self.frames,
            "minimized": self.repro is not None,
            "repro_note": self.repro_note,
            "culprit": self.culprit,
        }


INPUT_KINDS = (
    "missing_error",
    "unexpected_error",
    "unknown_event_id",
    "echo_too_long",
    "oversized_error",
    "internal_error",
    "no_answer",
)
CLOSE_KINDS = ("unexpected_close",)
ORDERING_KINDS = ("ordering",)
BYSTANDER_KINDS = ("bystander_audio", "bystander_error")
SERVER_KINDS = ("server_dead", "fresh_session", "connect_failed")
SPIN_KINDS = ("busy_loop",)
FLOOD_KINDS = ("flood_close", "flood_refusal", "flood_error", "flood_unlimited")


@dataclass
class FuzzReport:
    sent: Counter[str] = field(default_factory=Counter)
    """Fuzz messages sent, by endpoint ("ws", "stream")."""
    barriers: int = 0
    replayed: int = 0
    examples: int = 0
    families: Counter[str] = field(default_factory=Counter)
    errors_by_code: Counter[str] = field(default_factory=Counter)
    closes_by_code: Counter[str] = field(default_factory=Counter)
    findings: dict[tuple[str, str, str], Finding] = field(default_factory=dict)
    bystander: dict[str, Any] = field(default_factory=lambda: {"rounds": 0, "identical": 0})
    server_alive: bool | None = None
    busy_loop: dict[str, Any] = field(default_factory=dict)
    floods: list[dict[str, Any]] = field(default_factory=list)
    """What the flooder did in each barrage (``bench.fuzzing.flooder``)."""
    duration_s: float = 0.0
    timings: Counter[str] = field(default_factory=Counter)
    """Seconds spent per phase: prepare, barrage, minimize, finish."""

    @property
    def messages(self) -> int:
        return sum(self.sent.values())

    def add(self, finding: Finding) -> bool:
        """Record a finding; True when it is the first of its key."""
        known = self.findings.get(finding.key)
        if known is not None:
            known.count += 1
            return False
        self.findings[finding.key] = finding
        return True

    def of_kind(self, *kinds: str) -> list[Finding]:
        return [f for f in self.findings.values() if f.kind in kinds]

    def summary(self) -> dict[str, Any]:
        return {
            "messages_sent": self.messages,
            "messages_by_endpoint": dict(self.sent),
            "barrier_messages": self.barriers,
            "replay_messages": self.replayed,
            "examples": self.examples,
            "errors_by_code": dict(sorted(self.errors_by_code.items())),
            "closes_by_code": dict(sorted(self.closes_by_code.items())),
            "server_alive": self.server_alive,
            "bystander": self.bystander,
            "busy_loop": self.busy_loop,
            "floods": self.floods,
            "families": dict(sorted(self.families.items())),
            "findings": [f.to_json() for f in sorted(self.findings.values(), key=_finding_order)],
            "duration_s": round(self.duration_s, 2),
            "timings_s": {k: round(v, 2) for k, v in self.timings.items()},
        }

    def describe(self, findings: Iterable[Finding] | None = None) -> str:
        chosen = sorted(
            self.findings.values() if findings is None else findings, key=_finding_order
        )
        lines = [
            f"{len(chosen)} distinct finding(s) after {self.messages} fuzz messages "
            f"({dict(self.sent)}), server alive: {self.server_alive}"
        ]
        for f in chosen:
            culprit = f" <- {f.culprit}" if f.culprit and f.culprit != f.label else ""
            lines.append(f"- [{f.endpoint}] {f.kind} @ {f.label}{culprit} (x{f.count}): {f.detail}")
            frames = f.repro if f.repro is not None else f.frames
            note = "minimal repro" if f.repro is not None else "as sent"
            if f.repro_note:
                note += f"; {f.repro_note}"
            if frames:
                lines.append(f"    {note}:")
                lines += [f"      {frame}" for frame in frames[:12]]
                if len(frames) > 12:
                    lines.append(f"      ... {len(frames) - 12} more")
        return "\n".join(lines)


def _finding_order(f: Finding) -> tuple[str, str, str]:
    return (f.kind, f.endpoint, f.label)
