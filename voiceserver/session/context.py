"""One live context of a session: its text buffering and its audio output stage.

The context is prepared at once (reference audio, voice) but takes an engine slot
only once it has something to speak (its first segment of text, a flush or its
end): until then its handle is parked, so contexts opened and left empty cost no
engine capacity.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from protocol.messages import ContextSettings
from voiceserver.audio import OutputStage
from voiceserver.engine.client import ContextHandle
from voiceserver.metrics import RequestTracker
from voiceserver.session.output import ContextOutput
from voiceserver.text.segmenter import TextSegmenter
from voiceserver.text.words import WordStreamer


@dataclass
class LiveContext:
    context_id: str
    handle: ContextHandle
    """The context on the engine's side (parked until it has something to speak)."""
    settings: ContextSettings
    stage: OutputStage
    output: ContextOutput
    """Drives ``stage`` from the event loop: in place or in the encode pool."""
    segmenter: TextSegmenter | None
    """Sentence/clause segmentation, for models that need whole segments."""
    streamer: WordStreamer | None
    """Word release, for models that read text while they speak."""
    tracker: RequestTracker
    last_activity: float
    """When it last received text or sent audio (monotonic seconds)."""
    chars: int = 0
    frames_in: int = 0
    """Model-rate samples received from the engine."""
    flush_names: dict[int, str | None] = field(default_factory=dict)
    """Engine flush id -> the client's flush_id."""
    ended: bool = False
    gone: bool = False
    """Cancelled or failed: drop whatever the engine still sends."""
    timer: asyncio.TimerHandle | None = None

    @property
    def cid(self) -> int:
        return self.handle.cid

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
