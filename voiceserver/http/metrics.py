"""GET /metrics in the Prometheus text format.

With API keys configured the endpoint needs one, like every other; Prometheus
sends it with ``authorization: {credentials: KEY}`` (or ``credentials_file``) in
the scrape config (docs/browsers.md shows one).
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from voiceserver.http.errors import ApiError, check_auth, error_response
from voiceserver.http.speech import request_id_of


async def metrics_endpoint(request: Request) -> Response:
    rt = request.app.state.runtime
    try:
        check_auth(request, rt.server.api_keys)
    except ApiError as err:
        return error_response(err, request_id_of(request), rt.metrics, "http")
    return Response(generate_latest(rt.metrics.registry), media_type=CONTENT_TYPE_LATEST)
