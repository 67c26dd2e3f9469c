"""The scoring routes, one per client convention; all of them feed one :class:`RerankService`.

* ``POST /rerank`` — Hugging Face TEI (``truncation_direction`` included), optionally fused with
  first-stage ``scores``; errors in TEI's shape and statuses (429 overloaded, 424 a failed forward pass).
* ``POST /v1/rerank``, ``POST /v2/rerank`` — Cohere / Jina (v1 ``rank_fields`` over object documents,
  ``meta.billed_units.search_units``); errors as Cohere's ``{"message"}``.
* ``POST /opensearch/text_similarity`` — OpenSearch ML connector.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Literal

import numpy as np
from fastapi import FastAPI
from pydantic import Field, create_model

from jingpai.reranker.fusion import FusionError, fused_order, ranks_of
from jingpai.reranker.service.errors import InvalidInputError
from jingpai.reranker.service.schemas import (
    ApiVersion,
    BilledUnits,
    CohereMeta,
    CohereRerankRequest,
    CohereRerankResponse,
    CohereResult,
    ModelTensor,
    ModelTensorOutput,
    TeiRank,
    TeiRerankRequest,
    TextSimilarityRequest,
    TextSimilarityResponse,
    scoring_errors,
)
from jingpai.reranker.service.scoring import RerankService


def add_tei_route(app: FastAPI, service: RerankService) -> None:
    """``POST /rerank`` (TEI)."""

    @app.post("/rerank", response_model=list[TeiRank], response_model_exclude_none=True, tags=["rerank"], responses=scoring_errors("tei"))
    async def tei_rerank(req: TeiRerankRequest) -> list[TeiRank]:
        """TEI-compatible rerank: all texts, best first; with ``scores``, fused with those first-stage scores."""
        spec = req.fusion_spec()
        raw = await service.score(
            req.query, req.texts, truncate=req.truncate is not False, query_field="query", docs_field="texts",
            cut="left" if req.truncation_direction.lower() == "left" else "right", keywords=req.given_words(),
        )
        scores = raw if req.raw_scores else service.normalize(raw)
        if spec is None:
            order = np.argsort(-scores, kind="stable")
            return [TeiRank(index=int(i), score=float(scores[i]), text=req.texts[i] if req.return_text else None) for i in order]
        engine_ranks = ranks_of(req.scores)
        try:
            fused = spec.fuse(req.scores, scores, engine_ranks=engine_ranks)
        except FusionError as exc:
            raise InvalidInputError(str(exc)) from exc
        # ties of the fused score keep the first-stage order
        return [
            TeiRank(index=int(i), score=float(fused[i]), model_score=float(scores[i]), text=req.texts[i] if req.return_text else None)
            for i in fused_order(fused, engine_ranks)
        ]


def _cohere_handler(service: RerankService, version: str, request_model: Any) -> Any:
    async def rerank(req: CohereRerankRequest) -> CohereRerankResponse:
        texts = req.texts()
        raw, units = await asyncio.gather(
            service.score(
                req.query, texts, max_chunks=req.max_chunks_per_doc, doc_tokens=req.max_tokens_per_doc,
                query_field="query", docs_field="documents",
            ),
            service.search_units(req.query, texts, doc_tokens=req.max_tokens_per_doc),
        )
        scores = service.normalize(raw)
        order = np.argsort(-scores, kind="stable")[: req.top_n]
        results = [
            CohereResult(index=int(i), relevance_score=float(scores[i]), document=req.returned(int(i)) if req.return_documents else None)
            for i in order
        ]
        meta = CohereMeta(api_version=ApiVersion(version=version), billed_units=BilledUnits(search_units=units))
        return CohereRerankResponse(id=str(uuid.uuid4()), model=service.model_name, results=results, meta=meta)

    rerank.__doc__ = f"Cohere/Jina-compatible rerank (API v{version}): top_n results, best first."
    # FastAPI validates against the annotation; the annotations here are strings naming module-level types
    rerank.__annotations__["req"] = request_model
    return rerank


def add_cohere_routes(app: FastAPI, service: RerankService) -> None:
    """``POST /v1/rerank`` and ``POST /v2/rerank`` (Cohere / Jina)."""
    # the served name is known only here: narrowing the field's type makes the schema's enum and the
    # validation one and the same
    served = service.model_name
    request_model = create_model(
        "CohereRerankRequest", __base__=CohereRerankRequest, __doc__=CohereRerankRequest.__doc__,
        model=(Literal[served] | None, Field(None, description=f"the served model's name, {served!r}, or left out")),  # type: ignore[valid-type]
    )
    for version in ("1", "2"):
        app.post(
            f"/v{version}/rerank", response_model=CohereRerankResponse, response_model_exclude_none=True, tags=["rerank"],
            name=f"cohere_rerank_v{version}", responses=scoring_errors("cohere"),
        )(_cohere_handler(service, version, request_model))


def add_opensearch_route(app: FastAPI, service: RerankService) -> None:
    """``POST /opensearch/text_similarity`` (OpenSearch ML connector)."""

    @app.post("/opensearch/text_similarity", response_model=TextSimilarityResponse, tags=["rerank"], responses=scoring_errors("service"))
    async def opensearch_text_similarity(req: TextSimilarityRequest) -> TextSimilarityResponse:
        """OpenSearch ML connector shape: one similarity tensor per document, in input order."""
        raw = await service.score(req.query_text, req.text_docs, query_field="query_text", docs_field="text_docs")
        scores = service.normalize(raw)
        return TextSimilarityResponse(inference_results=[ModelTensorOutput(output=[ModelTensor(data=[float(s)])]) for s in scores])


def add_rerank_routes(app: FastAPI, service: RerankService) -> None:
    """Every scoring route, in the order ``/openapi.json`` lists them."""
    add_tei_route(app, service)
    add_cohere_routes(app, service)
    add_opensearch_route(app, service)


__all__ = ["add_cohere_routes", "add_opensearch_route", "add_rerank_routes", "add_tei_route"]
