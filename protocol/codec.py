"""JSON encoding and decoding of protocol messages, with errors mapped to stable codes.

Decoding failures raise :class:`~protocol.errors.ProtocolError`:

- ``invalid_json``: the bytes are not JSON, the JSON is not an object, or it nests deeper
  than the parser allows (a recursion limit, about a thousand levels);
- ``unknown_type``: ``type`` is missing, not a string, or not a known message type;
- ``missing_field``: a required field is absent (``param`` is its path);
- ``unsupported_value``: a value outside an enumerated set (the message lists the
  allowed values), or values that do not fit together (Opus sample rates);
- ``invalid_field``: a wrong type or an out-of-range value (``param`` is its path,
  e.g. ``output_format.sample_rate`` or ``speaker_embedding[3]``), or a string with an
  unpaired UTF-16 surrogate (``"\\ud800"``) or a control character (see
  :func:`protocol.validation.check_text`).

The error carries the ``event_id`` and ``context_id`` of the rejected message when
they could be read, so the answer can point at the request that failed.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import (
    CLIENT_MESSAGE_TYPES,
    ID_MAX_LEN,
    SERVER_MESSAGE_TYPES,
    ClientMessage,
    ErrorMessage,
    ServerMessage,
)
from protocol.validation import ALLOWED_VALUES, check_client_message, unsupported

_PATH_RE = re.compile(r" - at (?:`key` in )?`\$(?P<path>[^`]*)`$")  # a dict key: its dict
_MISSING_RE = re.compile(r"^Object missing required field `(?P<field>[^`]+)`")
_ENUM_RE = re.compile(r"^Invalid enum value (?P<value>.+)$")
_UNKNOWN_TAG_RE = re.compile(r"^Invalid value (?P<value>.+)$")
_NOT_OBJECT_RE = re.compile(r"^Expected `object`, got `(?P<got>\w+)`$")

_encoder = msgspec.json.Encoder()


def message_tags(types: tuple[type[msgspec.Struct], ...]) -> tuple[str, ...]:
    """The wire ``type`` strings of tagged Struct classes."""
    return tuple(str(t.__struct_config__.tag) for t in types)


CLIENT_TYPES = message_tags(CLIENT_MESSAGE_TYPES)
SERVER_TYPES = message_tags(SERVER_MESSAGE_TYPES)
_client_decoder = msgspec.json.Decoder(ClientMessage)
_server_decoder = msgspec.json.Decoder(ServerMessage)


class _Envelope(msgspec.Struct):
    """What can still be read from a message that failed validation."""

    type: Any = None
    event_id: Any = None
    context_id: Any = None


_envelope_decoder = msgspec.json.Decoder(_Envelope)


def decode_client(data: str | bytes) -> ClientMessage:
    """Decode and validate one client message; raises ProtocolError."""
    msg = decode_tagged(_client_decoder, data, CLIENT_TYPES)
    try:
        check_client_message(msg)
    except ProtocolError as err:
        raise err.replace(
            event_id=msg.event_id, context_id=getattr(msg, "context_id", None)
        ) from None
    return msg


def decode_server(data: str | bytes) -> ServerMessage:
    """Decode one server message (client side); raises ProtocolError."""
    return decode_tagged(_server_decoder, data, SERVER_TYPES)


def encode_server(msg: ServerMessage) -> str:
    """JSON text of a server message."""
    return _encoder.encode(msg).decode()


def encode_client(msg: ClientMessage) -> str:
    """JSON text of a client message."""
    return _encoder.encode(msg).decode()


def encode_message(msg: msgspec.Struct) -> str:
    """JSON text of any protocol Struct (used by the compatibility message sets too)."""
    return _encoder.encode(msg).decode()


def error_to_message(err: ProtocolError) -> ErrorMessage:
    """The ``error`` message that reports ``err``."""
    return ErrorMessage(
        code=str(err.code),
        message=err.message,
        fatal=err.fatal,
        param=err.param,
        event_id=err.event_id,
        context_id=err.context_id,
    )


def decode_tagged(
    decoder: msgspec.json.Decoder,
    data: str | bytes,
    known_types: tuple[str, ...],
    allowed: dict[str, tuple[object, ...]] = ALLOWED_VALUES,
) -> Any:
    """Decode with a tagged-union ``decoder``, mapping msgspec failures to ProtocolError."""
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        err = validation_error(str(exc), known_types, allowed)
    except RecursionError:
        err = ProtocolError(
            ErrorCode.INVALID_JSON, "message is not valid JSON: it is nested too deeply"
        )
    except (msgspec.DecodeError, UnicodeEncodeError) as exc:
        # msgspec refuses lone surrogates ("\ud800" escapes, or a str holding one) as
        # undecodable; say which field holds one rather than "not JSON".
        err = _surrogate_error(data) or ProtocolError(
            ErrorCode.INVALID_JSON, f"message is not valid JSON: {exc}"
        )
    if err.code is not ErrorCode.INVALID_JSON:
        err = _annotate(err, data)
    raise err


def _surrogate_error(data: str | bytes) -> ProtocolError | None:
    """A field error when ``data`` is JSON whose only fault is an unpaired surrogate."""
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    if _SURROGATE.search(text) is None:
        return None
    try:
        # The standard library's parser keeps lone surrogates, so it can show where one is.
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None  # not an object: "not valid JSON" says it
    found = _find_surrogate(value, "")
    if found is None:
        return None
    err = ProtocolError(
        ErrorCode.INVALID_FIELD,
        f"`{found}` contains an unpaired UTF-16 surrogate; send plain Unicode text",
        param=found,
    )
    return _annotate(err, data)


_SURROGATE = re.compile("[\ud800-\udfff]|\\\\u[dD][89a-fA-F]")


def _find_surrogate(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        return (path or "$") if _SURROGATE.search(value) else None
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        if isinstance(key, str) and _SURROGATE.search(key):
            return path or "$"  # the key itself: name the object holding it
        sub = f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))
        found = _find_surrogate(item, sub)
        if found is not None:
            return found
    return None


def validation_error(
    text: str, known_types: tuple[str, ...], allowed: dict[str, tuple[object, ...]]
) -> ProtocolError:
    """Map the text of a msgspec ValidationError to a ProtocolError with a field path."""
    path = ""
    detail = text
    match = _PATH_RE.search(text)
    if match:
        path = match.group("path").removeprefix(".")
        detail = text[: match.start()]

    if not path and (got := _NOT_OBJECT_RE.match(detail)):
        return ProtocolError(
            ErrorCode.INVALID_JSON,
            f"a message must be a JSON object, got {got.group('got')}",
        )
    if missing := _MISSING_RE.match(detail):
        field = missing.group("field")
        param = f"{path}.{field}" if path else field
        if param == "type":
            return ProtocolError(
                ErrorCode.UNKNOWN_TYPE,
                f"message has no `type` field; known types: {', '.join(known_types)}",
                param="type",
            )
        return ProtocolError(
            ErrorCode.MISSING_FIELD, f"missing required field `{param}`", param=param
        )
    if path == "type":
        tag = _UNKNOWN_TAG_RE.match(detail)
        what = (
            f"unknown message type {shown(tag.group('value'))}"
            if tag
            else "`type` must be a string"
        )
        return ProtocolError(
            ErrorCode.UNKNOWN_TYPE,
            f"{what}; known types: {', '.join(known_types)}",
            param="type",
        )
    if enum := _ENUM_RE.match(detail):
        leaf = re.sub(r"\[\d+\]$", "", path.rsplit(".", 1)[-1])
        values = allowed.get(leaf)
        if values is not None:
            value = _literal(enum.group("value"))
            return unsupported(path, shown(value) if isinstance(value, str) else value, values)
        return ProtocolError(
            ErrorCode.UNSUPPORTED_VALUE,
            f"`{path}`: unsupported value {shown(enum.group('value'))}",
            param=path,
        )
    return ProtocolError(
        ErrorCode.INVALID_FIELD, f"invalid field `{path}`: {shown(detail, 200)}", param=path or None
    )


def _literal(shown: str) -> object:
    """Turn msgspec's repr of a rejected enum value back into the value."""
    if len(shown) >= 2 and shown[0] == shown[-1] == "'":
        return shown[1:-1]
    try:
        return int(shown)
    except ValueError:
        return shown


def _annotate(err: ProtocolError, data: str | bytes) -> ProtocolError:
    """Fill in the rejected message's ``event_id``/``context_id`` where they can be read;
    ids too long to be valid are not echoed (an error must not amplify its input)."""
    try:
        env = _envelope_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeEncodeError, RecursionError):
        try:
            env = _Envelope(**{k: v for k, v in json.loads(data).items() if k in _ENVELOPE_KEYS})
        except (ValueError, RecursionError, UnicodeDecodeError, AttributeError, TypeError):
            return err
    return err.replace(event_id=_echoable(env.event_id), context_id=_echoable(env.context_id))


_ENVELOPE_KEYS = ("type", "event_id", "context_id")


def _echoable(value: Any) -> str | None:
    if not isinstance(value, str) or len(value) > ID_MAX_LEN or _SURROGATE.search(value):
        return None  # a lone surrogate could not even be encoded in the reply
    return value


SHOWN_MAX = 64
"""Longest rejected value an error message repeats."""


def shown(value: str, limit: int = SHOWN_MAX) -> str:
    """A rejected value as an error message may show it: short, and encodable."""
    value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value if len(value) <= limit else value[: limit - 1] + "…"
