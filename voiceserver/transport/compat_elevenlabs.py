"""ElevenLabs's streaming TTS API, served by our engine (routes filled in by its issue's work)."""

from __future__ import annotations

from starlette.routing import BaseRoute


def elevenlabs_routes() -> list[BaseRoute]:
    """The HTTP and WebSocket routes of ElevenLabs's API that this server answers."""
    return []
