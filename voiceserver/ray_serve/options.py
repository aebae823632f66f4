"""``voiceserver ray``'s flags: the server's own (:mod:`voiceserver.server_args`) plus
how Ray Serve runs the replicas. The same parser reads ``serve run``'s ``key=value``
arguments (:func:`argv_of`), so both entry points mean the same by a name."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from voiceserver.config import ModelConfig, ServerConfig
from voiceserver.lifecycle import CUT_GRACE_S
from voiceserver.server_args import add_server_arguments, configs_from_args

DEFAULT_APP_NAME = "voiceserver"
DRAIN_MARGIN_S = 10.0
"""Serve's force-kill deadline is this much past ``--shutdown-timeout`` plus the cut's
farewells: the replica's own drain always acts first."""
WAIT_LOOP_S = 0.5
"""How often Serve looks whether a draining replica has finished (its default, 2 s,
would hold every drained replica up to 2 s after its last session ended)."""


@dataclass(frozen=True)
class ReplicaOptions:
    """How many replicas, what each reserves, and how they scale and drain."""

    app_name: str = DEFAULT_APP_NAME
    route_prefix: str = "/"
    replicas: int | None = None
    """Fixed replica count; None: one per GPU of the cluster (one when replicas use none)."""
    min_replicas: int | None = None
    max_replicas: int | None = None
    """With both set, Serve scales between them on active streams."""
    target_streams: float = 16.0
    """Active streams (contexts in flight) a replica should carry on average."""
    upscale_delay_s: float = 30.0
    downscale_delay_s: float = 600.0
    gpus_per_replica: float = 0.0
    cpus_per_replica: float = 1.0
    max_ongoing_requests: int = 1000
    """Sessions and HTTP requests Serve routes to one replica at once; more wait in
    Serve's queue. Each WebSocket session is one ongoing request for its whole life."""
    shutdown_timeout_s: float = 10.0
    """Mirrors ``ServerConfig.shutdown_timeout_s``: how long a drained replica's
    contexts may finish before they are cut (1012)."""

    @property
    def autoscaling(self) -> bool:
        return self.min_replicas is not None

    @property
    def graceful_shutdown_timeout_s(self) -> float:
        return self.shutdown_timeout_s + CUT_GRACE_S + WAIT_LOOP_S + DRAIN_MARGIN_S


def add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Ray Serve")
    group.add_argument(
        "--address",
        default=None,
        help="Ray cluster to join (host:port of its head, or 'auto'); default: the running"
        " cluster if there is one, else a local one started here",
    )
    group.add_argument("--name", default=DEFAULT_APP_NAME, help="Serve application name")
    group.add_argument("--route-prefix", default="/", help="URL prefix (default: %(default)s)")
    group.add_argument(
        "--replicas",
        type=int,
        default=None,
        help="fixed number of replicas (default: one per GPU in the cluster, or one when"
        " replicas take no GPU)",
    )
    group.add_argument("--min-replicas", type=int, default=None, help="autoscaling: at least")
    group.add_argument("--max-replicas", type=int, default=None, help="autoscaling: at most")
    group.add_argument(
        "--target-streams",
        type=float,
        default=16.0,
        help="autoscaling: active streams (contexts in flight) per replica to aim at"
        " (default: %(default)s); set it to what one replica carries in real time",
    )
    group.add_argument(
        "--upscale-delay", type=float, default=30.0, help="autoscaling: seconds (default: 30)"
    )
    group.add_argument(
        "--downscale-delay", type=float, default=600.0, help="autoscaling: seconds (default: 600)"
    )
    group.add_argument(
        "--gpus-per-replica",
        type=float,
        default=None,
        help="GPUs each replica reserves (default: 1 when the model's device is cuda, else 0)",
    )
    group.add_argument(
        "--cpus-per-replica", type=float, default=1.0, help="CPUs each replica reserves"
    )
    group.add_argument(
        "--max-ongoing-requests",
        type=int,
        default=1000,
        help="WebSocket sessions and HTTP requests one replica takes at once; more wait in"
        " Serve's queue (default: %(default)s); the server refuses past its own capacity",
    )
    group.add_argument(
        "--proxy-location",
        choices=("EveryNode", "HeadOnly"),
        default="EveryNode",
        help="where Serve runs its HTTP proxies (default: %(default)s)",
    )
    group.add_argument(
        "--detach",
        action="store_true",
        help="deploy and exit, leaving the application running (default: serve until"
        " Ctrl-C or SIGTERM, then drain and delete the application)",
    )


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(
        prog="voiceserver ray",
        description="Run the voice server on Ray Serve: one replica per GPU across a Ray"
        " cluster behind Serve's HTTP proxy.",
    )
    add_server_arguments(out)
    add_ray_arguments(out)
    return out


def parse(argv: list[str]) -> argparse.Namespace:
    args = parser().parse_args(argv)
    if (args.min_replicas is None) != (args.max_replicas is None):
        raise SystemExit("--min-replicas and --max-replicas go together (autoscaling)")
    if args.min_replicas is not None and args.replicas is not None:
        raise SystemExit("--replicas is a fixed count; with --min/--max-replicas leave it out")
    if args.min_replicas is not None and not 0 <= args.min_replicas <= args.max_replicas:
        raise SystemExit("--min-replicas must be between 0 and --max-replicas")
    if args.replicas is not None and args.replicas < 1:
        raise SystemExit("--replicas must be at least 1")
    if args.gpus is not None:
        raise SystemExit(
            "--gpus: on Ray, each replica gets its GPUs from Ray (--gpus-per-replica); a"
            " replica is one server, with --engines N engine processes if you want several"
        )
    if args.target_streams <= 0:
        raise SystemExit("--target-streams must be above 0")
    return args


def configs_of(args: argparse.Namespace) -> tuple[ServerConfig, ModelConfig, ReplicaOptions]:
    server, model = configs_from_args(args)
    gpus = args.gpus_per_replica
    if gpus is None:
        gpus = 1.0 if str(model.model.get("device", "")).startswith("cuda") else 0.0
    options = ReplicaOptions(
        app_name=args.name,
        route_prefix=args.route_prefix,
        replicas=args.replicas,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        target_streams=args.target_streams,
        upscale_delay_s=args.upscale_delay,
        downscale_delay_s=args.downscale_delay,
        gpus_per_replica=gpus,
        cpus_per_replica=args.cpus_per_replica,
        max_ongoing_requests=args.max_ongoing_requests,
        shutdown_timeout_s=server.shutdown_timeout_s,
    )
    return server, model, options


def argv_of(args: Mapping[str, Any]) -> list[str]:
    """``serve run`` / Serve config ``args`` as flags: ``{"model": "/ckpt", "option":
    ["noise_scale=0"], "no_demo": True}`` -> ``--model /ckpt --option noise_scale=0
    --no-demo``. A list repeats its flag; for a switch, true is the bare flag and false
    leaves it out."""
    switches = {
        flag for action in parser()._actions if action.nargs == 0 for flag in action.option_strings
    }
    argv: list[str] = []
    for key, value in args.items():
        flag = "--" + str(key).replace("_", "-")
        for item in value if isinstance(value, list | tuple) else [value]:
            if flag in switches:
                if str(item).lower() == "true":
                    argv.append(flag)
                elif str(item).lower() != "false":
                    raise SystemExit(f"{key}: a switch takes true or false, got {item!r}")
            else:
                argv += [flag, str(item)]
    return argv
