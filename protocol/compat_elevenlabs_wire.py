"""What ElevenLabs' sockets put on the wire, apart from the session's bookkeeping
(sans-I/O): the three messages in both flavours (text-to-speech: camelCase, text-to-
dialogue: snake_case), how long a payload plays in each output format, SSML tags taken
out of text, and the context a refused message names."""

from __future__ import annotations

import base64
import re
from typing import Any

import msgspec

from protocol.compat_elevenlabs import (
    Alignment,
    AudioOutput,
    DialogueAlignment,
    DialogueAudio,
    DialogueError,
    DialogueFinal,
    ErrorOutput,
    FinalOutput,
    FormatSpec,
    encode_output,
    error_name,
)
from protocol.compat_elevenlabs_alignment import AudioClock, CbrClock, OggOpusClock, SampleClock
from protocol.errors import ProtocolError, close_code_for
from protocol.messages import ID_MAX_LEN


def audio_line(
    payload: bytes, alignment: Alignment | None, context_id: str | None, dialogue: bool
) -> str:
    """An audio message: base64 ``payload`` and the characters it speaks."""
    audio = base64.b64encode(payload).decode("ascii")
    if not dialogue:
        return encode_output(
            AudioOutput(
                audio=audio,
                alignment=alignment,
                normalizedAlignment=alignment,
                contextId=context_id,
            )
        )
    snake = None
    if alignment is not None:
        snake = DialogueAlignment(
            chars=alignment.chars,
            char_start_times_ms=alignment.charStartTimesMs,
            char_durations_ms=alignment.charDurationsMs,
        )
    return encode_output(DialogueAudio(audio=audio, alignment=snake, context_id=context_id))


def final_line(context_id: str | None, dialogue: bool) -> str:
    """A context's last message."""
    if dialogue:
        return encode_output(DialogueFinal(is_final=True, context_id=context_id))
    return encode_output(FinalOutput(isFinal=True, contextId=context_id))


def error_line(error: ProtocolError, context_id: str | None, dialogue: bool) -> str:
    """An error; ``code`` is the close code when the socket closes after it."""
    code = int(close_code_for(error.code)) if error.fatal else None
    name = error_name(error.code)
    if dialogue:
        return encode_output(
            DialogueError(message=error.message, error=name, code=code, context_id=context_id)
        )
    return encode_output(
        ErrorOutput(message=error.message, error=name, code=code, contextId=context_id)
    )


_TAG = re.compile(r"<[^<>]{0,512}>")


def strip_tags(text: str) -> str:
    """``text`` without SSML tags (``<break time="1s"/>``, ``<phoneme ...>word</phoneme>``:
    the word stays). A tag must arrive whole, in one message, as ElevenLabs asks."""
    return _TAG.sub("", text) if "<" in text else text


def audio_clock(spec: FormatSpec) -> AudioClock:
    """How the socket measures the audio of a payload in ``spec``'s format."""
    width = spec.bytes_per_sample
    if width is not None:
        return SampleClock(spec.sample_rate, width)
    if spec.codec == "mp3":
        assert spec.kbps is not None
        return CbrClock(spec.kbps)
    return OggOpusClock()


class _Peek(msgspec.Struct):
    context_id: Any = None
    contextId: Any = None  # noqa: N815


_peek = msgspec.json.Decoder(_Peek)


def peek_context(data: str) -> str | None:
    """The context a refused message names, if it can be read and echoed."""
    try:
        peeked = _peek.decode(data)
    except (msgspec.DecodeError, UnicodeEncodeError, RecursionError):
        return None
    for value in (peeked.context_id, peeked.contextId):
        if isinstance(value, str) and value and len(value) <= ID_MAX_LEN:
            return value
    return None
