"""Model options on the native socket: what one message sets, checked, over what was set.

The protocol knows no model. The server hands :class:`~protocol.session.ServerSession`
a :class:`ModelOptions`: the served model's fields (listed in ``session.created``) and
the check every ``session.update`` and ``context.create`` goes through, which turns
the message's ``options`` and its top-level option fields (:data:`OPTION_FIELDS`)
into the values to keep, or raises ProtocolError naming the field (the message is
then refused and nothing changes).

Within a message a top-level field wins over the same name in ``options``; a context
takes the session's options updated by its own; a null in ``options`` unsets a name
(the model's default applies again).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from protocol.messages import OPTION_FIELDS, ContextCreate, OptionField, SessionUpdate

OptionsCheck = Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]]
"""``(options, top_level) -> kept``: both without nulls; raises ProtocolError."""


def keep_all(options: Mapping[str, Any], top_level: Mapping[str, Any]) -> dict[str, Any]:
    """The check of a session with no model behind it: everything, top-level winning."""
    return {**options, **top_level}


@dataclass(frozen=True)
class ModelOptions:
    """The served model's options as a session sees them."""

    fields: tuple[OptionField, ...] = ()
    """What ``session.created`` lists."""
    check: OptionsCheck = keep_all
    """The server's check of one message's options against the model."""

    def apply(
        self, current: Mapping[str, Any], msg: SessionUpdate | ContextCreate
    ) -> dict[str, Any]:
        """``current`` updated by ``msg``; raises ProtocolError from the check."""
        sent = msg.options or {}
        top_level = {
            name: value for name in OPTION_FIELDS if (value := getattr(msg, name)) is not None
        }
        kept = self.check({k: v for k, v in sent.items() if v is not None}, top_level)
        unset = {name for name, value in sent.items() if value is None}
        out = {name: value for name, value in current.items() if name not in unset}
        out.update(kept)
        return out
