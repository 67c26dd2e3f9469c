"""The gateway as an ASGI app, and the one place where exceptions become HTTP errors.

:func:`create_app` puts the gateway's routes in front of a catch-all pass-through; a caller may add routes
of its own ahead of that pass-through (``jingpai gateway --ui`` and ``jingpai demo`` add the demo UI).
:func:`handle_exception` answers every error in the engine's error shape (``{"error": {"type", "reason",
"root_cause"}, "status"}``) so clients raise their usual exception types, and :meth:`guarded` answers them
inside the route so no error drops the client's keep-alive connection.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import aiohttp
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from jingpai.plugin.gateway.admin import admin_routes
from jingpai.plugin.gateway.errors import GatewayError
from jingpai.plugin.gateway.handlers import Gateway
from jingpai.plugin.gateway.metrics import EndpointKind
from jingpai.plugin.http_protocol import Utf8TargetHttpToolsProtocol
from jingpai.plugin.settings import GatewaySettings

# the whole gateway logs under one name, as before it was a package (operators' logging configs name it)
logger = logging.getLogger(__package__)

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]

Endpoint = Callable[[Request], Awaitable[Response]]


def es_error(status: int, error_type: str, reason: str) -> JSONResponse:
    """An Elasticsearch/OpenSearch-shaped error body, so clients raise their usual exception types."""
    cause = {"type": error_type, "reason": reason}
    return JSONResponse({"error": {"root_cause": [cause], **cause}, "status": status}, status_code=status)


def http_error(status: int, reason: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """An HTTP-level error of the gateway's own routes (404, 405 …) in the engine's error shape."""
    kinds = {404: "jingpai_not_found_exception", 405: "jingpai_method_not_allowed_exception"}
    response = es_error(status, kinds.get(status, "jingpai_http_exception"), reason)
    response.headers.update(headers or {})
    return response


def handle_exception(exc: Exception, *, method: str, path: str, expose_internals: bool = False) -> Response:
    """The one place that turns exceptions into HTTP errors (ES-shaped bodies).

    Args:
        expose_internals: name the engine's host and the low-level error in the body; otherwise only the
            error's type is named and the details go to the gateway's log.
    """
    if isinstance(exc, GatewayError):
        return es_error(exc.status, exc.error_type, str(exc))
    if isinstance(exc, HTTPException):
        return http_error(exc.status_code, str(exc.detail), exc.headers)
    detail = f"{type(exc).__name__}: {exc}" if expose_internals else f"{type(exc).__name__} (details in the gateway log)"
    if isinstance(exc, (TimeoutError, aiohttp.ServerTimeoutError)):
        logger.warning("engine timed out on %s %s: %s", method, path, exc)
        return es_error(504, "jingpai_engine_timeout_exception", f"the engine did not answer {method} {path} in time: {detail}")
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        logger.warning("the engine's TLS certificate is not trusted (%s %s): %s; set --engine-ca-file to the CA that signed it",
                       method, path, exc)
        return es_error(502, "jingpai_engine_tls_exception", "the gateway does not trust the engine's TLS certificate; its operator "
                        f"sets --engine-ca-file (JINGPAI_GATEWAY_ENGINE_CA_FILE) to the CA that signed it: {detail}")
    if isinstance(exc, aiohttp.ClientError):
        logger.warning("engine unreachable for %s %s: %s", method, path, exc)
        return es_error(502, "jingpai_engine_unreachable_exception", f"cannot reach the engine: {detail}")
    logger.exception("unexpected error on %s %s", method, path)
    return es_error(500, "jingpai_gateway_exception", f"internal gateway error: {detail}")


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return http_error(exc.status_code, str(exc.detail), exc.headers)


def guarded(endpoint: Endpoint, *, expose_internals: bool = False) -> Endpoint:
    """``endpoint`` answering its exceptions itself (:func:`handle_exception`).

    Starlette hands exceptions not handled by a route to its server-error middleware, which re-raises
    them after answering, and uvicorn then drops the client's keep-alive connection; answered here, the
    connection stays usable.
    """

    @functools.wraps(endpoint)
    async def answer(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as exc:  # noqa: BLE001 — every error is answered by handle_exception
            return handle_exception(exc, method=request.method, path=request.url.path, expose_internals=expose_internals)

    return answer


def create_app(settings: GatewaySettings, *, routes: Sequence[BaseRoute] = ()) -> Starlette:
    """The gateway as an ASGI app (serve it with uvicorn and ``app.state.http_protocol``).

    Args:
        settings: :class:`~jingpai.plugin.settings.GatewaySettings`.
        routes: extra routes served ahead of the pass-through to the engine, e.g. the demo UI's
            ``jingpai.ui.app.ui_routes()`` (the gateway itself serves no UI).

    Returns:
        A Starlette app; ``app.state.gateway`` is its :class:`~jingpai.plugin.gateway.handlers.Gateway`.

    Raises:
        jingpai.keyword_dict.DictionaryError: a ``dict_dirs`` entry holds no dictionary.
        jingpai.plugin.dictionaries.DictionaryRootError: ``dict_root`` is not a directory.
    """
    gateway = Gateway(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await gateway.aclose()

    def route(kind: EndpointKind) -> Callable[[Endpoint], Endpoint]:
        """An endpoint answering its own errors (:func:`guarded`), counted and timed as ``kind``."""
        return lambda endpoint: gateway.metrics.observed(kind, guarded(endpoint, expose_internals=settings.expose_internals))

    search, msearch = route("search"), route("msearch")
    # the search routes first: Starlette tries routes in order on every request, and searches are the
    # traffic (no admin or UI path ends in _search or _msearch)
    app = Starlette(routes=[
        Route("/{index}/_search", search(gateway.search), methods=["GET", "POST"]),
        Route("/_search", search(gateway.search), methods=["GET", "POST"]),
        Route("/{index}/_msearch", msearch(gateway.msearch), methods=["GET", "POST"]),
        Route("/_msearch", msearch(gateway.msearch), methods=["GET", "POST"]),
        *routes,
        *admin_routes(gateway, route("jingpai")),
        Route("/{path:path}", route("passthrough")(gateway.passthrough), methods=ALL_METHODS),
    ], lifespan=lifespan, exception_handlers={HTTPException: _http_exception})
    app.state.gateway = gateway
    # uvicorn's HTTP parser refuses raw UTF-8 in a request target, which the engines accept (jingpai.serving
    # and `jingpai gateway` serve the app with this protocol)
    app.state.http_protocol = Utf8TargetHttpToolsProtocol
    return app


__all__ = ["ALL_METHODS", "create_app", "es_error", "guarded", "handle_exception", "http_error"]
