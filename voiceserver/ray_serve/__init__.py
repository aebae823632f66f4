"""The voice server on Ray Serve: one replica of the whole server per GPU across a Ray
cluster, HTTP and WebSockets through Serve's proxy (docs/scaling.md).

Two entry points, the same flags:

- ``voiceserver ray [--model DIR | --config NAME] [--replicas N | --min-replicas A
  --max-replicas B] ...`` (:func:`main`): joins or starts a cluster, deploys, serves;
- ``serve run voiceserver.ray_serve:app_builder model=DIR replicas=2`` or a Serve
  config YAML whose application has ``import_path: voiceserver.ray_serve:app_builder``
  and ``args:`` (:func:`app_builder`).

Ray is optional (``pip install 'voiceserver[ray]'``): nothing here imports it until
one of these is called.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def app_builder(args: Mapping[str, Any]) -> Any:
    """Serve's application builder: ``args`` are ``voiceserver ray``'s flags by name
    (``model``, ``config``, ``option: [k=v, ...]``, ``replicas``, ``shutdown_timeout``...)."""
    from voiceserver.ray_serve.app import application_of
    from voiceserver.ray_serve.options import argv_of, parse

    app, _ = application_of(parse(argv_of(args)))
    return app


def main(argv: list[str]) -> None:
    """``voiceserver ray ARGS``: deploy and serve until Ctrl-C/SIGTERM (or ``--detach``)."""
    from voiceserver.ray_serve.main import main as run

    run(argv)
