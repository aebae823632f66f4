"""Autoscaling on active streams.

Each replica reports the contexts it has in flight (the ``tts_active_requests``
gauge of its ``/metrics``: WebSocket contexts, HTTP and compatibility-socket
utterances) as the custom metric ``active_streams``; this policy asks for as many
replicas as carry the deployment's total at ``target_streams`` each. Serve applies
``min_replicas``/``max_replicas``, ``upscale_delay_s``/``downscale_delay_s`` and the
scaling factors around it. Serve's own default (``target_ongoing_requests``) counts
WebSocket sessions instead, idle ones included.
"""

from __future__ import annotations

import math
from typing import Any

ACTIVE_STREAMS = "active_streams"
POLICY_PATH = "voiceserver.ray_serve.autoscaling:ActiveStreamsPolicy"


class ActiveStreamsPolicy:
    """A Serve autoscaling policy (``AutoscalingPolicy(policy_function=POLICY_PATH,
    policy_kwargs={"target_streams": N})``)."""

    def __init__(self, target_streams: float = 16.0) -> None:
        if target_streams <= 0:
            raise ValueError(f"target_streams must be above 0, got {target_streams}")
        self.target_streams = target_streams

    def __call__(self, ctx: Any) -> tuple[int, dict[str, Any]]:
        """``ctx`` is Serve's ``AutoscalingContext``: per-replica metrics averaged over
        its look-back window."""
        per_replica = (ctx.aggregated_metrics or {}).get(ACTIVE_STREAMS) or {}
        if not per_replica:  # nothing reported yet (starting up): keep the target
            return ctx.target_num_replicas, ctx.policy_state
        total = sum(per_replica.values())
        return math.ceil(total / self.target_streams), ctx.policy_state
