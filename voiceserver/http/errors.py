"""Errors of the HTTP endpoints, in OpenAI's JSON shape.

OpenAI answers a bad request with
``{"error": {"message", "type", "param", "code"}}``: ``type`` is e.g.
``invalid_request_error``, ``param`` names the offending field (or null),
``code`` is a short string or null. vllm-omni (through vLLM's ``ErrorResponse``)
sends the same envelope, but with ``type`` set to ``BadRequestError`` /
``NotFoundError`` and ``code`` set to the HTTP status as an integer; clients of
both read ``error.message`` (the OpenAI SDK raises ``BadRequestError``,
``AuthenticationError``, ``NotFoundError`` from the status alone). We follow
OpenAI: ``type`` from the status, ``code`` one of our stable string codes
(the same ones the WebSocket protocol uses), ``param`` the request field.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from models.base import ModelInputError
from protocol.errors import ErrorCode
from voiceserver.metrics import Metrics
from voiceserver.transport.auth import key_ok, offered_key

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}
# Model and engine codes that are not the client's fault.
_STATUS_OF_CODE = {
    ErrorCode.UNKNOWN_MODEL: 404,
    ErrorCode.INTERNAL_ERROR: 500,
    ErrorCode.OVERLOADED: 503,
    ErrorCode.ENGINE_FAILED: 503,
    ErrorCode.RATE_LIMITED: 429,
}


class ApiError(Exception):
    """A request the endpoint refuses; becomes one JSON error response."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.retry_after = retry_after
        """Seconds a client should wait before retrying (503), sent as Retry-After."""

    @property
    def type(self) -> str:
        return _TYPES.get(self.status, "invalid_request_error")

    def body(self) -> dict[str, object]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def invalid(param: str, message: str, code: str = ErrorCode.INVALID_FIELD) -> ApiError:
    """400 naming ``param``; ``message`` says what is allowed."""
    return ApiError(400, f"{param}: {message}", param=param, code=code)


def from_model_error(err: ModelInputError) -> ApiError:
    return ApiError(_STATUS_OF_CODE.get(err.code, 400), str(err), param=err.param, code=err.code)


def from_engine_failure(code: str, message: str, param: str | None) -> ApiError:
    return ApiError(_STATUS_OF_CODE.get(code, 400), message, param=param, code=code)


def error_response(
    err: ApiError, request_id: str, metrics: Metrics | None = None, endpoint: str = "http"
) -> JSONResponse:
    if metrics is not None:
        metrics.error(endpoint, str(err.code or f"http_{err.status}"))
    headers = {"x-request-id": request_id}
    if err.status == 401:
        headers["www-authenticate"] = "Bearer"
    if err.status == 408:
        headers["connection"] = "close"  # the rest of the body may still be on its way
    if err.retry_after is not None:
        headers["retry-after"] = str(err.retry_after)
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def check_auth(request: Request, keys: tuple[str, ...]) -> None:
    """Raise a 401 ApiError unless the request carries one of ``keys`` (none: open)."""
    offered = offered_key(request.headers)
    if key_ok(keys, offered):
        return
    if offered is None:
        message = "missing API key: send 'Authorization: Bearer <key>'"
    else:
        message = "invalid API key"
    raise ApiError(401, message, code=ErrorCode.UNAUTHORIZED)
