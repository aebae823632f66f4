"""The served voices as Cartesia's clients see them: ids, and ``GET /voices`` entries.

A voice (the loaded model's own, or one uploaded through ``/v1/audio/voices``) answers
to its name in any case and to a stable UUID derived from it
(:func:`protocol.compat_cartesia.voice_uuid`), which is its ``id`` in the listing, so
clients that only take UUID-shaped ids work, and a name typed by hand works too.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from protocol.compat_cartesia import voice_uuid
from voiceserver.runtime import Runtime

_uuid_of = lru_cache(maxsize=4096)(voice_uuid)


@dataclass(frozen=True)
class CartesiaVoice:
    name: str
    description: str
    language: str
    created_at: int
    """Unix seconds (0 for the model's own voices)."""
    uploaded: bool

    @property
    def id(self) -> str:
        return _uuid_of(self.name)

    def entry(self) -> dict[str, Any]:
        """The voice as Cartesia's ``Voice`` object (GET /voices, GET /voices/{id})."""
        language = self.language.split("-")[0].lower() or "en"
        created = dt.datetime.fromtimestamp(self.created_at, dt.UTC)
        return {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "tagline": "",
            "language": language,
            "locales": [{"locale": self.language, "is_native": True}],
            "is_owner": self.uploaded,
            "is_public": not self.uploaded,
            "access": "private" if self.uploaded else "public",
            "visibility": "owner" if self.uploaded else "all",
            "created_at": created.isoformat().replace("+00:00", "Z"),
            "gender": None,
        }


class CartesiaVoices:
    """The :class:`protocol.compat_cartesia.VoiceBook` of one server: every lookup reads
    the current voices, so an upload is usable at once."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def all(self) -> list[CartesiaVoice]:
        """The model's voices first, then the uploaded ones by name."""
        caps = self.rt.model.capabilities
        own = [
            CartesiaVoice(v.name, v.description or "", v.language or caps.languages[0], 0, False)
            for v in caps.voices
        ]
        uploaded = [
            CartesiaVoice(
                s.record.name,
                s.record.description or "uploaded voice",
                caps.languages[0],
                s.record.created_at,
                True,
            )
            for s in self.rt.voices.list()
        ]
        return own + uploaded

    def find(self, voice_id: str) -> CartesiaVoice | None:
        key = voice_id.strip().lower()
        for voice in self.all():
            if key in (voice.name.lower(), voice.id):
                return voice
        return None

    def name_of(self, voice_id: str) -> str | None:
        voice = self.find(voice_id)
        return voice.name if voice is not None else None

    def listing(self, limit: int = 20) -> str:
        voices = self.all()
        shown = ", ".join(f"{v.name} (id {v.id})" for v in voices[:limit])
        more = len(voices) - limit
        return shown + (f" and {more} more" if more > 0 else "") if voices else "none"
