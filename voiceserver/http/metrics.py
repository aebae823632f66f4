"""GET /metrics in the Prometheus text format."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response


async def metrics_endpoint(request: Request) -> Response:
    registry = request.app.state.runtime.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
