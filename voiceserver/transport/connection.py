"""What the server's own protocol classes add to a connection's ASGI scope.

``voiceserver.server`` runs uvicorn with protocol classes that put an
``abort`` hook into ``scope["extensions"]``: a way to drop a connection at
once, discarding the bytes it has not sent. Closing politely is not enough
for a client that stopped reading: a close frame, or the end of a response,
waits behind everything unsent, forever. Under another ASGI server the hook
is absent and abort falls back to nothing (the connection closes when its
server decides).
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

ABORT_EXTENSION = "voiceserver.abort"


def set_abort(scope: MutableMapping[str, Any], abort: Callable[[], None]) -> None:
    extensions = scope.get("extensions")
    if extensions is None:
        extensions = scope["extensions"] = {}
    extensions[ABORT_EXTENSION] = {"abort": abort}


def abort_connection(scope: MutableMapping[str, Any]) -> bool:
    """Abort the connection of ``scope``; False where the server offers no hook."""
    hook = (scope.get("extensions") or {}).get(ABORT_EXTENSION, {}).get("abort")
    if hook is None:
        return False
    hook()
    return True
