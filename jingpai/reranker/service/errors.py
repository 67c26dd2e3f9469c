"""The rerank service's errors and the one place they (and FastAPI's own) become HTTP responses.

Every response of a failed request is ``{"error": message, "error_type": kind}`` (:class:`ErrorBody
<jingpai.reranker.service.schemas.ErrorBody>`). :data:`HTTP_STATUS` says which status and kind each
:class:`ServiceError` answers; :func:`error_response` applies it and also covers FastAPI's validation
errors, routing errors and bugs.

The errors sit in :mod:`jingpai.errors`' two branches: the client's input is wrong
(:class:`PayloadTooLargeError`, :class:`InvalidInputError`: :class:`~jingpai.errors.UserError`) or the
service cannot take the work now (:class:`QueueTimeoutError`, :class:`ServiceClosedError`:
:class:`~jingpai.errors.UnavailableError`).

>>> http_status(QueueTimeoutError("busy", retry_after_s=3))
(503, 'overloaded')
>>> isinstance(InvalidInputError("x"), UserError), InvalidInputError("x").status_code
(True, 422)
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from jingpai.errors import JingpaiError, UnavailableError, UserError

logger = logging.getLogger(__name__)


class ServiceSettingsError(UserError, ValueError):
    """A service setting that is invalid, or that this machine or model cannot honour."""


class ServiceError(JingpaiError):
    """An error the service reports to the client; :func:`error_response` turns it into HTTP."""

    @property
    def status_code(self) -> int:
        """The HTTP status this error answers (from :data:`HTTP_STATUS`)."""
        return http_status(self)[0]

    @property
    def error_type(self) -> str:
        """The ``error_type`` of the response body (from :data:`HTTP_STATUS`)."""
        return http_status(self)[1]


class PayloadTooLargeError(ServiceError, UserError):
    """Body, document count or a pair over a configured limit."""


class InvalidInputError(ServiceError, UserError):
    """A request the model cannot score (query too long, no documents, input the model rejects)."""


class QueueTimeoutError(ServiceError, UnavailableError):
    """The request waited longer than ``queue_timeout_ms`` for its first batch."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ServiceClosedError(ServiceError, UnavailableError):
    """The batching engine was shut down."""


class ScoringError(ServiceError):
    """The model's forward pass failed for this request."""


#: the one place service errors meet HTTP: class → (status, ``error_type``); an error answers as the
#: first class of its MRO listed here
HTTP_STATUS: dict[type[ServiceError], tuple[int, str]] = {
    PayloadTooLargeError: (413, "payload_too_large"),
    InvalidInputError: (422, "validation"),
    QueueTimeoutError: (503, "overloaded"),
    ServiceClosedError: (503, "unavailable"),
    ScoringError: (500, "backend"),
    ServiceError: (500, "internal"),
}


def http_status(exc: ServiceError) -> tuple[int, str]:
    """``(status, error_type)`` of ``exc`` per :data:`HTTP_STATUS`."""
    return next(HTTP_STATUS[cls] for cls in type(exc).__mro__ if cls in HTTP_STATUS)


def error_response(exc: Exception) -> JSONResponse:
    """The one place that maps exceptions to HTTP responses: ``{"error": message, "error_type": kind}``."""
    headers: dict[str, str] = {}
    if isinstance(exc, ServiceError):
        (status, kind), message = http_status(exc), str(exc)
        if isinstance(exc, QueueTimeoutError):
            headers["Retry-After"] = str(exc.retry_after_s)
    elif isinstance(exc, StarletteHTTPException) and exc.status_code == 400 and exc.__cause__ is not None:
        # FastAPI's answer to a body it cannot even decode (not UTF-8/16/32 text); its own detail names no cause
        status, kind = 400, "bad_request"
        message = f"the body could not be read as JSON text ({type(exc.__cause__).__name__}: {exc.__cause__})"
    elif isinstance(exc, StarletteHTTPException):  # routing: 404, 405
        status, kind, message = exc.status_code, "http", str(exc.detail)
        headers.update(exc.headers or {})
    elif isinstance(exc, RequestValidationError):
        status, kind = 422, "validation"
        message = "; ".join(_describe_validation_error(err) for err in exc.errors())
    else:
        logger.exception("unhandled error", exc_info=exc)
        status, kind, message = 500, "internal", f"internal error: {type(exc).__name__}: {exc}"
    return JSONResponse({"error": message, "error_type": kind}, status_code=status, headers=headers)


def _describe_validation_error(err: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
    if err.get("type") == "json_invalid":
        return f"the body is not valid JSON (at character {loc}: {err.get('ctx', {}).get('error', 'invalid')})"
    if err.get("type") == "extra_forbidden":
        return f"{loc}: unknown field (see /openapi.json for the accepted fields)"
    if loc == "body" and err.get("type") in ("missing", "model_attributes_type"):
        return "the body must be a JSON object sent with content-type: application/json (see /openapi.json)"
    if err.get("type") == "too_short":
        n = err.get("ctx", {}).get("min_length", 1)
        return f"{loc} must hold at least {n} item{'s' if n != 1 else ''}"
    if loc == "model" and err.get("type") == "literal_error":
        expected = err.get("ctx", {}).get("expected", "?")
        return f"model {err.get('input')!r} is not served here; this service serves {expected} (send that name or leave model out)"
    return f"{loc}: {err.get('msg', 'invalid')}"


__all__ = [
    "HTTP_STATUS",
    "InvalidInputError",
    "PayloadTooLargeError",
    "QueueTimeoutError",
    "ScoringError",
    "ServiceClosedError",
    "ServiceError",
    "ServiceSettingsError",
    "error_response",
    "http_status",
]
