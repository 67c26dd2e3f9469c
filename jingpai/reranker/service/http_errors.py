"""Exceptions → HTTP responses: the one handler of the rerank app (and of its body-limit middleware).

A :class:`~jingpai.reranker.service.errors.ServiceError` answers the status and ``error_type`` that
:data:`~jingpai.reranker.service.errors.HTTP_STATUS` gives its class; FastAPI's own errors (a body that
is no JSON text, a failed validation, an unknown route) and bugs get the same ``{"error", "error_type"}``
body, with a message that names the bad field or value.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from jingpai.reranker.service.errors import QueueTimeoutError, ServiceError, http_status

logger = logging.getLogger(__name__)


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


__all__ = ["error_response"]
