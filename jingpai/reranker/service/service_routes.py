"""The operational routes: ``GET /health`` (liveness), ``GET /info`` (what is served) and ``GET /metrics``."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from jingpai import __version__
from jingpai.reranker.service.errors import ServiceClosedError
from jingpai.reranker.service.schemas import ErrorBody, Health, Info, Limits
from jingpai.reranker.service.scoring import RerankService


def describe(service: RerankService) -> Info:
    """The ``/info`` answer: model, architecture, dictionary version, device, dtype, limits and the
    embedding dimensions (and TEI's ``model_id``, ``max_input_length``, ``max_client_batch_size``, ``auto_truncate``)."""
    model, settings = service.model, service.settings
    hf_config = getattr(model.net, "config", None)
    return Info(
        model_id=service.model_name,
        model_name=service.model_name,
        architecture=model.name,
        model_dir=str(settings.model_dir) if settings.model_dir and settings.expose_model_dir else None,
        dictionary_version=model.keyword_dict_version,
        jingpai_version=__version__,
        device=str(model.device),
        dtype=service.dtype,
        compiled=service.engine.forward.compiled,
        token_ids_once=service.measure.joins,
        attention=getattr(hf_config, "_attn_implementation", None),
        score="sigmoid(logit)" if model.num_labels == 1 else "probability",
        long_docs=settings.long_docs,
        max_chunks_per_doc=settings.max_chunks_per_doc,
        token_counts="exact" if service.measure.exact else "estimated",
        max_input_length=service.max_length,
        max_client_batch_size=settings.max_docs,
        embedding_dim=service.embedder.dim,
        vector_model=service.model_identity,
        limits=Limits(
            max_docs=settings.max_docs, max_body_bytes=settings.max_body_bytes, max_query_chars=settings.max_query_chars,
            max_length=service.max_length, max_batch_tokens=service.engine.max_batch_tokens, queue_timeout_ms=settings.queue_timeout_ms,
        ),
    )


def add_service_routes(app: FastAPI, service: RerankService) -> None:
    """``GET /health``, ``GET /info`` and ``GET /metrics`` (Prometheus text format)."""

    @app.get("/health", response_model=Health, tags=["service"], responses={503: {"model": ErrorBody, "description": "the engine is shut down (error_type Unhealthy)"}})
    async def health() -> Health:
        """Liveness: 200 while the service accepts requests."""
        if service.engine.closed:
            raise ServiceClosedError("the rerank engine is shut down")
        return Health()

    @app.get("/info", response_model=Info, tags=["service"])
    async def info() -> Info:
        """What is served: model, architecture, dictionary version, device, dtype and limits."""
        return describe(service)

    @app.get(
        "/metrics", tags=["service"], response_class=Response,
        responses={200: {"description": "Prometheus text exposition format", "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
    )
    async def prometheus_metrics() -> Response:
        """Prometheus text format: requests, pairs, batch sizes, queue time, inference time."""
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)


__all__ = ["add_service_routes", "describe"]
