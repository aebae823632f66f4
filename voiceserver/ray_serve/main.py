"""``voiceserver ray``: join (or start) a Ray cluster, deploy, serve until stopped."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from types import FrameType

from voiceserver.ray_serve.app import application_of
from voiceserver.ray_serve.options import ReplicaOptions, parse
from voiceserver.ray_serve.proxy import CALLBACK_ENV, CALLBACK_PATH

log = logging.getLogger(__name__)


def main(argv: list[str]) -> None:
    args = parse(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    import ray
    from ray import serve

    _connect(args.address)
    options = deploy(args)
    if args.detach:
        log.info("detached: `serve delete %s` drains and removes it", options.app_name)
        return
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    stop.wait()
    log.info("draining and deleting the application %r", options.app_name)
    serve.delete(options.app_name)
    ray.shutdown()


def deploy(args: argparse.Namespace) -> ReplicaOptions:
    """Start Serve on the connected cluster (proxies on ``--host``/``--port``) and deploy
    the application; returns once its replicas are up."""
    from ray import serve

    app, options = application_of(args)
    serve.start(
        proxy_location=args.proxy_location,
        http_options={"host": args.host, "port": args.port},
        # Proxies inherit the controller's environment: this loads the middleware that
        # closes a dead replica's sockets with 1011 (voiceserver.ray_serve.proxy).
        controller_options={"runtime_env": {"env_vars": {CALLBACK_ENV: CALLBACK_PATH}}},
    )
    serve.run(app, name=options.app_name, route_prefix=options.route_prefix)
    where = f"http://{args.host}:{args.port}{options.route_prefix.rstrip('/')}"
    log.info(
        "voiceserver is served by Ray Serve at %s (WebSocket %s/v1/audio/speech/ws)",
        where,
        where.replace("http", "ws", 1),
    )
    return options


def _connect(address: str | None) -> None:
    """The given cluster; else the running one; else a local one started here."""
    import ray

    if address is not None:
        ray.init(address=address)
        return
    try:
        ray.init(address="auto")
    except ConnectionError:
        log.info("no running Ray cluster found: starting a local one")
        ray.init()
