"""What both entry points build: flags -> the Serve application."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from voiceserver.ray_serve.options import ReplicaOptions, configs_of

log = logging.getLogger(__name__)


def application_of(args: argparse.Namespace) -> tuple[Any, ReplicaOptions]:
    """The Serve application the parsed flags describe (Ray must be connected: the
    replica count per GPU reads the cluster's resources)."""
    from voiceserver.ray_serve.deployment import build_application

    server, model, options = configs_of(args)
    replicas = options.replicas or _replicas_for_cluster(options)
    return build_application(server, model, options, replicas), options


def _replicas_for_cluster(options: ReplicaOptions) -> int:
    """One replica per ``gpus_per_replica`` GPUs of the cluster; one without GPUs."""
    if options.autoscaling or options.gpus_per_replica <= 0:
        return 1
    import ray

    gpus = ray.cluster_resources().get("GPU", 0.0)
    count = int(gpus // options.gpus_per_replica)
    if count < 1:
        raise SystemExit(
            f"the Ray cluster has {gpus:g} GPU(s), fewer than --gpus-per-replica "
            f"{options.gpus_per_replica:g}; add GPU nodes (ray start --address ...) or pass "
            "--gpus-per-replica 0 for a CPU model"
        )
    log.info(
        "%d replica(s): one per %g GPU(s) of the cluster's %g",
        count,
        options.gpus_per_replica,
        gpus,
    )
    return count
