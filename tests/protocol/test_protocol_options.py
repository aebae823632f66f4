"""Model options on the native socket, protocol side: carried without ranges, checked by
the server's check, merged name by name (session, then context), listed in
session.created."""

import json
from collections.abc import Mapping
from typing import Any

import msgspec
import pytest

from protocol import (
    ContextOpened,
    ErrorCode,
    ErrorEvent,
    Limits,
    ProtocolError,
    ServerSession,
    SessionSettings,
)
from protocol.codec import decode_client, encode_server
from protocol.messages import OPTION_FIELDS, OPTIONS_MAX, OptionField, SessionCreated
from protocol.options import ModelOptions

FIELDS = (
    OptionField(name="temperature", type="number", minimum=0, maximum=2, default=0.9),
    OptionField(name="style", type="string", doc="how it sounds"),
)


def check(options: Mapping[str, Any], top_level: Mapping[str, Any]) -> dict[str, Any]:
    """A server's check: ``style`` and ``temperature`` only, temperature at most 2."""
    out = {}
    for name, value in {**options, **top_level}.items():
        if name not in ("style", "temperature"):
            raise ProtocolError(ErrorCode.INVALID_FIELD, f"{name}: not an option", param=name)
        if name == "temperature" and value > 2:
            raise ProtocolError(ErrorCode.INVALID_FIELD, "temperature: too hot", param=name)
        out[name] = value
    return out


def session(**kwargs: Any) -> ServerSession:
    return ServerSession(
        Limits(max_contexts=4, idle_timeout_s=30.0),
        SessionSettings(model="m", voice="v"),
        options=ModelOptions(FIELDS, check),
        **kwargs,
    )


def send(s: ServerSession, type_: str, **fields: Any) -> list:
    return s.receive_text(json.dumps({"type": type_, **fields}))


def opened(s: ServerSession, cid: str, **fields: Any) -> dict[str, Any]:
    [event] = send(s, "context.create", context_id=cid, **fields)
    assert isinstance(event, ContextOpened), event
    return event.settings.options


def test_session_created_lists_the_models_fields():
    created = json.loads(session().created_message("s1"))
    assert created["option_fields"] == [
        {"name": "temperature", "type": "number", "minimum": 0, "maximum": 2, "default": 0.9},
        {"name": "style", "type": "string", "doc": "how it sounds"},
    ]
    assert created["session"]["options"] == {}
    # Listed even when the model has none (a server that predates them sends none).
    bare = ServerSession(Limits(), SessionSettings())
    assert json.loads(bare.created_message("s2"))["option_fields"] == []
    old = (
        b'{"type":"session.created","session_id":"s","protocol_version":1,"session":{},"limits":{}}'
    )
    assert msgspec.json.decode(old, type=SessionCreated).option_fields == []


def test_options_merge_name_by_name_and_null_unsets():
    s = session()
    send(s, "session.update", options={"style": "calm"})
    send(s, "session.update", options={"temperature": 0.5})
    assert s.settings.options == {"style": "calm", "temperature": 0.5}
    assert s.settings.temperature == 0.5  # the top-level spelling shows its entry
    send(s, "session.update", options={"temperature": None})
    assert s.settings.options == {"style": "calm"} and s.settings.temperature is None


def test_a_context_takes_the_sessions_options_updated_by_its_own():
    s = session()
    send(s, "session.update", options={"style": "calm", "temperature": 0.5})
    assert opened(s, "a") == {"style": "calm", "temperature": 0.5}
    assert opened(s, "b", options={"style": "bright"}) == {"style": "bright", "temperature": 0.5}
    assert opened(s, "c", options={"temperature": None}) == {"style": "calm"}
    assert s.settings.options == {"style": "calm", "temperature": 0.5}  # untouched
    # An implicit context (first text.append) takes the session's.
    [event, _] = send(s, "text.append", context_id="d", text="hi")
    assert isinstance(event, ContextOpened) and event.settings.options == s.settings.options


def test_a_top_level_spelling_wins_over_options_in_the_same_message():
    s = session()
    assert opened(s, "a", options={"temperature": 1.5}, temperature=0.1) == {"temperature": 0.1}
    send(s, "session.update", temperature=1.0)
    assert s.settings.options == {"temperature": 1.0} and s.settings.temperature == 1.0


@pytest.mark.parametrize(
    ("fields", "param"),
    [({"options": {"pitch": 3}}, "pitch"), ({"temperature": 3}, "temperature")],
)
def test_a_refused_option_refuses_the_message_and_changes_nothing(fields, param):
    s = session()
    send(s, "session.update", options={"style": "calm"})
    [event] = send(s, "session.update", event_id="u", **fields)
    assert isinstance(event, ErrorEvent)
    assert (event.error.code, event.error.param, event.error.event_id) == (
        ErrorCode.INVALID_FIELD,
        param,
        "u",
    )
    assert s.settings.options == {"style": "calm"}
    [event] = send(s, "context.create", context_id="a", event_id="c", **fields)
    assert isinstance(event, ErrorEvent)
    assert (event.error.param, event.error.context_id, event.error.event_id) == (param, "a", "c")
    assert s.live_contexts == 0  # no context, no stream taken
    assert opened(s, "a") == {"style": "calm"}


def test_the_protocol_carries_option_values_without_ranges():
    # Ranges are the served model's (checked by the server): any JSON value decodes.
    for name in OPTION_FIELDS:
        for value in (-1, 10**12, 3.5, "x", [1], {"a": 1}, True):
            msg = decode_client(
                json.dumps({"type": "context.create", "context_id": "a", name: value})
            )
            assert getattr(msg, name) == value
    msg = decode_client('{"type":"session.update","options":{"any":{"deep":[1,"x"]}}}')
    assert msg.options == {"any": {"deep": [1, "x"]}}


@pytest.mark.parametrize(
    "options",
    [[1], "x", 3, {"": 1}, {"k" * 65: 1}, {f"k{i}": 1 for i in range(OPTIONS_MAX + 1)}],
)
def test_a_malformed_options_object_is_refused_naming_it(options):
    with pytest.raises(ProtocolError) as err:
        decode_client(json.dumps({"type": "session.update", "options": options}))
    assert (err.value.code, err.value.param) == (ErrorCode.INVALID_FIELD, "options")


def test_option_field_encodes_only_what_is_set():
    created = SessionCreated(
        session_id="s",
        protocol_version=1,
        session=SessionSettings(),
        limits=Limits(),
        option_fields=[OptionField(name="flag", type="boolean")],
    )
    assert json.loads(encode_server(created))["option_fields"] == [
        {"name": "flag", "type": "boolean"}
    ]
