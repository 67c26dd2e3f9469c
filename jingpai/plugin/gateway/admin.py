"""The gateway's own routes under ``/_jingpai/``: health, dictionary reload and metrics.

None of them calls the engine, so none needs (or checks) the client's credentials, as
``/_jingpai/health`` never did: they name no URL, path or host unless the operator set
``expose_internals``, and what they do is bounded by the operator's configuration. A reload rescans only the
configured ``--dict-root`` and ``--dict`` directories, on the one dictionary-loading thread, so reloads asked
for at once run one after the other, never side by side.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from jingpai.plugin.gateway.handlers import Gateway
from jingpai.plugin.gateway.metrics import Endpoint


async def health(gateway: Gateway, request: Request) -> Response:
    """``GET /_jingpai/health``: the gateway is up; its reranker and dictionaries as it sees them.

    It does not call the engine (that needs the client's credentials); the engine has its own health API.
    """
    reranker = None
    expose = gateway.settings.expose_internals  # anyone may call this: URLs only when the operator allows
    if gateway.reranker is not None:
        reranker = {"url": gateway.reranker.url} if expose else {}
        reranker["breaker"] = gateway.reranker.breaker.state
        if gateway.reranker.model_id is not None:  # TEI's /info model_id, known after the first rerank
            reranker["model"] = gateway.reranker.model_id
    return JSONResponse({
        "status": "ok",
        **({"engine_url": gateway.settings.engine_url} if expose else {}),
        "mode": gateway.settings.mode,
        "reranker": reranker,
        "dictionaries": gateway.dictionaries.versions,
    })


async def reload_dictionaries(gateway: Gateway, request: Request) -> Response:
    """``POST /_jingpai/reload``: rescan the dictionary root, re-read the ``--dict`` directories, forget the
    versions that could not be found, and load those searches asked for that are there now.

    Answers ``{"loaded": [versions], "available": [versions found, loaded on first use], "failed": N}``;
    with ``expose_internals`` also the root and each failed directory's reason (else in the gateway's log).
    """
    report = await gateway.dictionaries.areload()
    body: dict = {"loaded": report.loaded, "available": sorted(report.available), "failed": len(report.failed)}
    if gateway.settings.expose_internals:
        root = gateway.settings.dict_root
        body.update(dict_root=str(root) if root is not None else None, errors=report.failed,
                    paths={version: str(path) for version, path in report.available.items()})
    return JSONResponse(body)


async def metrics(gateway: Gateway, request: Request) -> Response:
    """``GET /_jingpai/metrics``: Prometheus exposition of :class:`~jingpai.plugin.gateway.metrics.GatewayMetrics`."""
    return gateway.metrics.exposition(request)


def admin_routes(gateway: Gateway, wrap: Callable[[Endpoint], Endpoint]) -> list[Route]:
    """The ``/_jingpai/*`` routes of ``gateway``, each endpoint passed through ``wrap`` (error answering, metrics)."""

    def bound(endpoint: Callable[[Gateway, Request], Awaitable[Response]]) -> Endpoint:
        return wrap(functools.partial(endpoint, gateway))

    return [
        Route("/_jingpai/health", bound(health), methods=["GET"]),
        Route("/_jingpai/reload", bound(reload_dictionaries), methods=["POST"]),
        Route("/_jingpai/metrics", bound(metrics), methods=["GET"]),
    ]


__all__ = ["admin_routes", "health", "metrics", "reload_dictionaries"]
