"""Tell the app when Serve starts taking this replica out.

Serve drains a replica (scale-down, redeploy, ``serve delete``) by taking it out of
routing, then waiting until its ongoing requests reach zero, and kills it after
``graceful_shutdown_timeout_s``. A WebSocket session is one ongoing request for its
whole life, and Serve gives user code no notice before the kill (``__del__`` runs
only once the requests are gone), so an idle socket would hold the replica to the
kill and a busy one would be cut mid-word without a close frame.

Ray 2.60 has no public hook for this, so the replica's ``perform_graceful_shutdown``
(the controller's call that starts the drain) is wrapped to call our callbacks first:
the app's :class:`voiceserver.lifecycle.Lifecycle` then drains as on SIGTERM (no new
contexts, busy sessions finish, the rest closed with 1012 at ``--shutdown-timeout``),
the sessions end, and Serve's own wait loop sees zero and completes. Pinned to the
Ray version in ``pyproject.toml``; if the method moves, :func:`on_replica_drain`
raises at replica start-up rather than draining silently wrong.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

_callbacks: list[Callable[[], None]] = []
_HOOKED = "__voiceserver_drain_hook__"


def on_replica_drain(callback: Callable[[], None]) -> None:
    """Call ``callback`` (on Serve's own thread, once) when Serve starts draining the
    replica that runs in this process."""
    _install()
    _callbacks.append(_once(callback))


def _install() -> None:
    from ray.serve._private.replica import Replica

    original = getattr(Replica, "perform_graceful_shutdown", None)
    if original is None:
        raise RuntimeError(
            "this Ray version's Serve replica has no perform_graceful_shutdown: "
            "install the Ray version voiceserver[ray] pins"
        )
    if getattr(original, _HOOKED, False):
        return

    @functools.wraps(original)
    def perform_graceful_shutdown(self: Any) -> Awaitable[None]:
        for callback in list(_callbacks):
            try:
                callback()
            except Exception:
                log.exception("drain callback failed; Serve's own drain goes on")
        return original(self)

    setattr(perform_graceful_shutdown, _HOOKED, True)
    Replica.perform_graceful_shutdown = perform_graceful_shutdown  # type: ignore[method-assign]


def _once(callback: Callable[[], None]) -> Callable[[], None]:
    called = False

    def call() -> None:
        nonlocal called
        if not called:
            called = True
            callback()

    return call
