"""The rerank service's FastAPI app (:func:`create_app`): one model, several client conventions.

The app is assembled from the route modules (:mod:`~jingpai.reranker.service.rerank_routes`,
:mod:`~jingpai.reranker.service.embed_routes`, :mod:`~jingpai.reranker.service.service_routes`), the body-limit/metrics middleware and one exception
handler (:func:`~jingpai.reranker.service.errors.error_response`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from jingpai import __version__
from jingpai.reranker.base import Reranker
from jingpai.reranker.service.embed_routes import add_embed_routes
from jingpai.reranker.service.errors import ServiceError
from jingpai.reranker.service.http_errors import dialect_of, error_response
from jingpai.reranker.service.metrics import ServiceMetrics
from jingpai.reranker.service.middleware import BodyLimitAndMetrics
from jingpai.reranker.service.rerank_routes import add_rerank_routes
from jingpai.reranker.service.scoring import RerankService
from jingpai.reranker.service.service_routes import add_service_routes
from jingpai.reranker.service.settings import ServiceSettings


async def _handle_error(request: Request, exc: Exception) -> JSONResponse:
    return error_response(exc, dialect=dialect_of(request.url.path))


def create_app(settings: ServiceSettings, model: Reranker, *, copy_model: bool = True) -> FastAPI:
    """The FastAPI app serving ``model`` under ``settings``.

    The service works on its own copy of ``model`` (its dtype, quantization and ``max_length`` are the
    copy's); ``settings.max_length`` (when set) replaces the model's own ``config.max_length`` there.

    Args:
        settings: service settings.
        model: a loaded reranker, already on its device (``Reranker.load(dir, device=...)``).
        copy_model: ``False``: the caller hands ``model`` over (it will not use it again), so the service
            changes it in place and saves a copy's memory.

    Returns:
        The app (``app.state.service`` is its :class:`RerankService`); run it with uvicorn. The batching
        engine starts with the first request (or at start-up when the server runs the lifespan) and
        stops at shutdown.

    Raises:
        ServiceSettingsError: ``settings.max_length`` exceeds the model's position embeddings, or the
            dtype cannot run on the model's device (also a ``ValueError``).
    """
    service = RerankService(model, settings, ServiceMetrics(), copy_model=copy_model)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await service.start()
        yield
        await service.close()

    app = FastAPI(
        title="jingpai rerank service",
        version=__version__,
        description="Reranks documents for a query with one jingpai model; TEI, Cohere/Jina and OpenSearch ML request shapes. "
        "A bi-encoder also embeds texts (TEI /embed, OpenAI /v1/embeddings).",
        lifespan=lifespan,
    )
    app.state.service = service
    for exc_type in (ServiceError, RequestValidationError, StarletteHTTPException, Exception):
        app.add_exception_handler(exc_type, _handle_error)
    add_rerank_routes(app, service)
    add_embed_routes(app, service)
    add_service_routes(app, service)
    routes = {r.path for r in app.routes if hasattr(r, "path")}
    app.add_middleware(BodyLimitAndMetrics, limit=settings.max_body_bytes, metrics=service.metrics, routes=routes)
    return app


__all__ = ["create_app"]
