"""The autoscaling policy asks for the replicas that carry the active streams at target."""

from __future__ import annotations

from ray.serve._private.common import DeploymentID, ReplicaID
from ray.serve.config import AutoscalingConfig, AutoscalingContext

from voiceserver.ray_serve.autoscaling import ACTIVE_STREAMS, ActiveStreamsPolicy

DEPLOYMENT = DeploymentID(name="VoiceServer", app_name="voiceserver")


def context(streams: list[float], target_replicas: int) -> AutoscalingContext:
    replicas = [ReplicaID(unique_id=f"r{i}", deployment_id=DEPLOYMENT) for i in range(len(streams))]
    metrics = {ACTIVE_STREAMS: dict(zip(replicas, streams, strict=True))} if streams else {}
    return AutoscalingContext(
        deployment_id=DEPLOYMENT,
        deployment_name=DEPLOYMENT.name,
        app_name=DEPLOYMENT.app_name,
        current_num_replicas=len(streams),
        target_num_replicas=target_replicas,
        running_replicas=replicas,
        total_num_requests=0.0,
        total_queued_requests=0.0,
        aggregated_metrics=metrics,
        raw_metrics={},
        capacity_adjusted_min_replicas=1,
        capacity_adjusted_max_replicas=10,
        policy_state={},
        last_scale_up_time=None,
        last_scale_down_time=None,
        current_time=None,
        config=AutoscalingConfig(min_replicas=1, max_replicas=10),
    )


def test_replicas_for_the_total_at_the_target() -> None:
    policy = ActiveStreamsPolicy(target_streams=16)
    assert policy(context([10, 20, 30], 3))[0] == 4  # 60 streams / 16
    assert policy(context([16, 16], 2))[0] == 2
    assert policy(context([1, 0, 0], 3))[0] == 1
    assert policy(context([0, 0], 2))[0] == 0  # Serve raises it to min_replicas


def test_no_report_yet_keeps_the_target() -> None:
    assert ActiveStreamsPolicy(target_streams=16)(context([], 2))[0] == 2
