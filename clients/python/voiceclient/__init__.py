"""Python client for the voice server's WebSocket protocol v1.

``VoiceClient`` (asyncio, over ``websockets``), the ``voiceserver say`` command
(:mod:`voiceclient.say`), and small HTTP helpers (:mod:`voiceclient.server_info`).
Imports only :mod:`protocol`, the standard library and third-party packages.
"""

from voiceclient.chunk import AudioChunk
from voiceclient.client import VoiceClient, synthesize
from voiceclient.context import VoiceContext
from voiceclient.errors import VoiceConnectionError, VoiceServerError

__all__ = [
    "AudioChunk",
    "VoiceClient",
    "VoiceConnectionError",
    "VoiceContext",
    "VoiceServerError",
    "synthesize",
]
