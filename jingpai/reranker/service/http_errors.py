"""Exceptions → HTTP responses: the one handler of the rerank app (and of its body-limit middleware).

A :class:`~jingpai.reranker.service.errors.ServiceError` answers the status and ``error_type`` that
:data:`~jingpai.reranker.service.errors.HTTP_STATUS` gives its class; FastAPI's own errors (a body that
is no JSON text, a failed validation, an unknown route) and bugs get the same body, with a message that
names the bad field or value. The body follows the route's client convention (:data:`ROUTE_DIALECT`):
TEI's ``{"error", "error_type"}``, Cohere's ``{"message"}`` on ``/v1/rerank`` and ``/v2/rerank``, or
OpenAI's ``{"error": {"message", "type", "param", "code"}}`` on ``/v1/embeddings``.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from jingpai.reranker.service.errors import ErrorDialect, ErrorType, QueueTimeoutError, ServiceError, http_status

logger = logging.getLogger(__name__)

#: the routes whose clients expect another error convention than the service's own (TEI's body)
ROUTE_DIALECT: dict[str, ErrorDialect] = {
    "/rerank": "tei", "/embed": "tei", "/v1/rerank": "cohere", "/v2/rerank": "cohere", "/v1/embeddings": "openai",
}

#: OpenAI's ``error.type`` by status class (``error.code`` carries the service's own kind, lowercased)
OPENAI_TYPE = {429: "rate_limit_error", 4: "invalid_request_error", 5: "server_error"}


def dialect_of(path: str) -> ErrorDialect:
    """The error convention of the route at ``path`` (``service`` for every route not in :data:`ROUTE_DIALECT`)."""
    return ROUTE_DIALECT.get(path, "service")


def error_response(exc: Exception, *, dialect: ErrorDialect = "service") -> JSONResponse:
    """The one place that maps exceptions to HTTP responses.

    Args:
        exc: the error.
        dialect: ``cohere``: ``{"message": message}``; ``openai``: ``{"error": {"message", "type", "param",
            "code"}}`` and 400 for an invalid request; otherwise TEI's ``{"error": message, "error_type": kind}``
            (``tei``: a failed forward pass answers TEI's 424 instead of 500).
    """
    headers: dict[str, str] = {}
    status: int
    kind: ErrorType
    param: str | None = None
    if isinstance(exc, ServiceError):
        (status, kind), message, param = http_status(exc, dialect=dialect), str(exc), exc.param
        if isinstance(exc, QueueTimeoutError):
            headers["Retry-After"] = str(exc.retry_after_s)
    elif isinstance(exc, StarletteHTTPException) and exc.status_code == 400 and exc.__cause__ is not None:
        # FastAPI's answer to a body it cannot even decode (not UTF-8/16/32 text); its own detail names no cause
        status, kind = 400, "Validation"
        message = f"the body could not be read as JSON text ({type(exc.__cause__).__name__}: {exc.__cause__})"
    elif isinstance(exc, StarletteHTTPException):  # routing: 404, 405
        status, kind, message = exc.status_code, "Http", str(exc.detail)
        headers.update(exc.headers or {})
    elif isinstance(exc, RequestValidationError):
        status, kind = 400 if dialect == "openai" else 422, "Validation"
        message = "; ".join(_describe_validation_error(err) for err in exc.errors())
        # OpenAI's param names the request field (input), not the branch of its type union (input.str);
        # invalid JSON has none (its location is a character position)
        first = exc.errors()[0] if exc.errors() else {}
        fields = [p for p in first.get("loc", ()) if p != "body"]
        param = str(fields[0]) if fields and first.get("type") != "json_invalid" else None
    else:
        logger.exception("unhandled error", exc_info=exc)
        status, kind, message = 500, "Internal", f"internal error: {type(exc).__name__}: {exc}"
    body: dict[str, Any]
    if dialect == "cohere":
        body = {"message": message}
    elif dialect == "openai":
        kind_of_error = OPENAI_TYPE.get(status, OPENAI_TYPE[status // 100])
        body = {"error": {"message": message, "type": kind_of_error, "param": param, "code": kind.lower()}}
    else:
        body = {"error": message, "error_type": kind}
    return JSONResponse(body, status_code=status, headers=headers)


def _describe_validation_error(err: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
    ctx = err.get("ctx", {})
    if err.get("type") == "json_invalid":
        return f"the body is not valid JSON (at character {loc}: {ctx.get('error', 'invalid')})"
    if err.get("type") == "extra_forbidden":
        return f"{loc}: unknown field (see /openapi.json for the accepted fields)"
    if loc == "body" and err.get("type") in ("missing", "model_attributes_type"):
        return "the body must be a JSON object sent with content-type: application/json (see /openapi.json)"
    if err.get("type") == "too_short":
        n = ctx.get("min_length", 1)
        return f"{loc} must hold at least {n} item{'s' if n != 1 else ''}"
    if loc == "model" and err.get("type") == "literal_error":
        expected = ctx.get("expected", "?")
        return f"model {err.get('input')!r} is not served here; this service serves {expected} (send that name or leave model out)"
    if err.get("type") == "value_error" and "error" in ctx:  # a model validator's own message names the problem
        return str(ctx["error"])
    return f"{loc}: {err.get('msg', 'invalid')}"


__all__ = ["OPENAI_TYPE", "ROUTE_DIALECT", "dialect_of", "error_response"]
