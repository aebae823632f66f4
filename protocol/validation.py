"""Value checks that a Struct type alone cannot express, and the allowed-value table.

The Structs in :mod:`protocol.messages` already reject wrong types, out-of-range
numbers and values outside a ``Literal`` set; this module adds the rules that span
fields (Opus has its own sample rates, Ogg carries only Opus) and lists the allowed
values by field name so error messages can name them.
"""

from __future__ import annotations

import re

from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import (
    AUDIO_TRANSPORTS,
    BUFFER_MODES,
    CONTAINERS,
    ENCODINGS,
    FRAME_MS_VALUES,
    OPUS_SAMPLE_RATES,
    PCM_SAMPLE_RATES,
    TIMESTAMP_MODES,
    ClientMessage,
    ContextCreate,
    OutputFormat,
    SessionUpdate,
    TextAppend,
)

# C0 controls other than tab, newline and carriage return, DEL, and UTF-16 surrogates
# (a str holding one is not Unicode text: no tokenizer or phonemizer can take it).
_BAD_TEXT_CHAR = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")

# Keyed by the last component of a field path ("output_format.encoding" -> "encoding").
ALLOWED_VALUES: dict[str, tuple[object, ...]] = {
    "encoding": ENCODINGS,
    "sample_rate": tuple(sorted(set(PCM_SAMPLE_RATES) | set(OPUS_SAMPLE_RATES))),
    "container": CONTAINERS,
    "frame_ms": FRAME_MS_VALUES,
    "audio_transport": AUDIO_TRANSPORTS,
    "timestamps": TIMESTAMP_MODES,
    "mode": BUFFER_MODES,
}


def format_allowed(values: tuple[object, ...]) -> str:
    """``"a", "b"`` style list for error messages."""
    return ", ".join(repr(v) if isinstance(v, str) else str(v) for v in values)


def unsupported(
    param: str, value: object, allowed: tuple[object, ...], why: str = ""
) -> ProtocolError:
    """An ``unsupported_value`` error naming the field, the value and the allowed values."""
    reason = f" {why}" if why else ""
    return ProtocolError(
        ErrorCode.UNSUPPORTED_VALUE,
        f"`{param}`: unsupported value {value!r}{reason}; allowed: {format_allowed(allowed)}",
        param=param,
    )


def check_output_format(fmt: OutputFormat, param: str = "output_format") -> None:
    """Raise ProtocolError(unsupported_value) if the fields of ``fmt`` do not fit together."""
    if fmt.encoding == "opus":
        if fmt.sample_rate not in OPUS_SAMPLE_RATES:
            raise unsupported(
                f"{param}.sample_rate", fmt.sample_rate, OPUS_SAMPLE_RATES, "for encoding 'opus'"
            )
    else:
        if fmt.sample_rate not in PCM_SAMPLE_RATES:
            raise unsupported(
                f"{param}.sample_rate",
                fmt.sample_rate,
                PCM_SAMPLE_RATES,
                f"for encoding {fmt.encoding!r}",
            )
        if fmt.container != "raw":
            raise unsupported(
                f"{param}.container", fmt.container, ("raw",), f"for encoding {fmt.encoding!r}"
            )


def check_client_message(msg: ClientMessage) -> None:
    """Cross-field checks of a decoded client message; raises ProtocolError."""
    _check_texts(msg)
    if isinstance(msg, SessionUpdate | ContextCreate) and msg.output_format is not None:
        check_output_format(msg.output_format)
    if (
        isinstance(msg, ContextCreate)
        and msg.ref_audio is not None
        and msg.speaker_embedding is not None
    ):
        raise ProtocolError(
            ErrorCode.INVALID_FIELD,
            "`speaker_embedding` and `ref_audio` are mutually exclusive; send one of them",
            param="speaker_embedding",
        )


def check_text(value: str, param: str) -> None:
    """Raise ProtocolError(invalid_field) when ``value`` holds a character no model can
    speak or tokenize: a control character other than tab/newline/carriage return, or an
    unpaired UTF-16 surrogate. The error names the field, the character and its index."""
    bad = _BAD_TEXT_CHAR.search(value)
    if bad is None:
        return
    ch = bad.group()
    what = "an unpaired UTF-16 surrogate" if "\ud800" <= ch <= "\udfff" else "a control character"
    raise ProtocolError(
        ErrorCode.INVALID_FIELD,
        f"`{param}` contains {what} (U+{ord(ch):04X}) at index {bad.start()}; send plain "
        "Unicode text (tab, newline and carriage return are the only control characters allowed)",
        param=param,
    )


def _check_texts(msg: ClientMessage) -> None:
    if isinstance(msg, TextAppend):
        check_text(msg.text, "text")
    if isinstance(msg, SessionUpdate | ContextCreate):
        for name in ("instructions", "ref_text"):
            value = getattr(msg, name, None)
            if value is not None:
                check_text(value, name)
