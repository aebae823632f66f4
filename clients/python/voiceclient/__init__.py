"""Python client for the voice server's WebSocket protocol v1.

``VoiceClient`` (asyncio, over ``websockets``), the ``voiceserver say`` command
(:mod:`voiceclient.say`), the LLM-to-speech bridge (:mod:`voiceclient.bridge`), and
small HTTP helpers (:mod:`voiceclient.server_info`). Imports only :mod:`protocol`, the
standard library and third-party packages. The agent-framework plugins
(:mod:`voiceclient.livekit_tts`, :mod:`voiceclient.pipecat_tts`) are imported only by
their users, so neither framework is needed otherwise.
"""

from voiceclient.chunk import AudioChunk
from voiceclient.client import VoiceClient, synthesize
from voiceclient.context import ContextEvent, TimedWords, VoiceContext
from voiceclient.errors import VoiceConnectionError, VoiceServerError

__all__ = [
    "AudioChunk",
    "ContextEvent",
    "TimedWords",
    "VoiceClient",
    "VoiceConnectionError",
    "VoiceContext",
    "VoiceServerError",
    "synthesize",
]
