"""Baseten's voice messages on the vllm-omni socket, answered from our voices API.

LiveKit's Baseten plugin (``register_voice`` / ``list_voices`` in its ``qwen3_tts.py``)
opens a socket, sends one ``voice.add`` or ``voice.list`` and reads one reply; Baseten's
server (basetenlabs/vllm-omni ``serving_speech_stream.py``) answers them at any time,
before the first ``session.config`` too. Here they map onto the same store and checks
as ``/v1/audio/voices`` (``voiceserver.http.voices``):

- ``voice.list`` -> ``voice.list.result``: ``voices`` the model's built-in names,
  ``uploaded_voices`` the stored clones as ``GET /v1/audio/voices`` lists them (the
  summary entries: every clone, without the long fields, so the reply stays small).
- ``voice.add`` -> ``voice.add.result``: the upload of ``POST /v1/audio/voices`` with
  Baseten's field names (``audio_data`` base64, ``audio_format``, ``ref_text``,
  ``consent``, ``speaker_description``), the same name rules, text limits, audio checks,
  store bounds and cloning off the event loop; ``{success: true, voice: entry}``, or
  ``{success: false, error}`` naming the field (Baseten's ``speaker_embedding`` form is
  refused: a clone is made from audio here).
- ``voice.remove`` -> ``voice.remove.result``: ``DELETE /v1/audio/voices/{name}``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from protocol.compat_vllm import (
    VllmVoiceAdd,
    VllmVoiceAddResult,
    VllmVoiceListResult,
    VllmVoiceRemove,
    VllmVoiceRemoveResult,
)
from voiceserver.clients import ClientId
from voiceserver.http.errors import ApiError
from voiceserver.http.voices import AUDIO_FIELD, clone_and_store, upload_from_json, voice_entry
from voiceserver.runtime import Runtime

log = logging.getLogger(__name__)

AUDIO_DATA = "audio_data"
"""Baseten's name for the field ``POST /v1/audio/voices`` calls ``audio_sample``."""
MIME_TYPES = {
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "flac": "audio/flac",
    "ogg": "audio/ogg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "m4a": "audio/mp4",
    "mp4": "audio/mp4",
    "webm": "audio/webm",
}
"""``audio_format`` -> the MIME type kept with the voice (the audio is sniffed, not trusted)."""


def list_voices(rt: Runtime) -> VllmVoiceListResult:
    return VllmVoiceListResult(
        voices=sorted(voice.name for voice in rt.model.capabilities.voices),
        uploaded_voices=[voice_entry(stored, summary=True) for stored in rt.voices.list()],
    )


async def add_voice(rt: Runtime, msg: VllmVoiceAdd, client: ClientId | None) -> VllmVoiceAddResult:
    """Clone and store the voice; a refusal is ``success: false`` with the reason."""
    if msg.speaker_embedding is not None:
        return _add_refused(
            "speaker_embedding: a voice is cloned from reference audio here; send the audio"
            f" as {AUDIO_DATA} (base64) instead"
        )
    body = {
        "name": msg.name,
        AUDIO_FIELD: msg.audio_data,
        "ref_text": msg.ref_text,
        "consent": msg.consent,
        "speaker_description": msg.speaker_description,
        "x_vector_only": msg.x_vector_only_mode,
    }
    try:
        upload = upload_from_json(body)
        if upload.mime_type is None and msg.audio_format is not None:
            upload = replace(upload, mime_type=MIME_TYPES.get(msg.audio_format.lower()))
        stored = await clone_and_store(rt, upload, client)
    except ApiError as err:
        return _add_refused(_baseten_names(err.message))
    log.info("vllm-compatible socket: stored voice %r", stored.record.name)
    return VllmVoiceAddResult(success=True, voice=voice_entry(stored))


def _add_refused(message: str) -> VllmVoiceAddResult:
    return VllmVoiceAddResult(success=False, error=message)


def _baseten_names(message: str) -> str:
    """The HTTP checks name ``audio_sample``; this client sent ``audio_data``."""
    return message.replace(AUDIO_FIELD, AUDIO_DATA)


async def remove_voice(rt: Runtime, msg: VllmVoiceRemove) -> VllmVoiceRemoveResult:
    name = msg.name or ""
    if not name:
        return _remove_refused(name, "name: required (the uploaded voice to remove)")
    if rt.voices.is_builtin(name):
        return _remove_refused(
            name, f"name: {name!r} is a built-in voice of this model and cannot be removed"
        )
    try:
        removed = await asyncio.to_thread(rt.voices.remove, name)
    except OSError as exc:
        log.exception("removing voice %r failed", name)
        return _remove_refused(name, f"could not remove voice {name!r}: {exc}")
    if removed is None:
        uploaded = ", ".join(rt.voices.names()) or "none"
        return _remove_refused(
            name, f"name: {name!r} is not an uploaded voice of this model; uploaded: {uploaded}"
        )
    return VllmVoiceRemoveResult(success=True, name=removed.record.name)


def _remove_refused(name: str, message: str) -> VllmVoiceRemoveResult:
    return VllmVoiceRemoveResult(success=False, name=name, error=message)
