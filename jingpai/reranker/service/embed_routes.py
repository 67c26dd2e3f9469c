"""The embedding routes, one per client convention; both feed the service's
:class:`~jingpai.reranker.service.embedding.TextEmbedder`, and through it the reranking routes' batching
engine and limits.

* ``POST /embed`` — Hugging Face TEI: ``{inputs, normalize?, truncate?, truncation_direction?,
  dimensions?}`` → ``[[float, ...], ...]`` in input order; errors as TEI's ``{error, error_type}``.
* ``POST /v1/embeddings`` — OpenAI: ``{input, model?, encoding_format?, dimensions?, user?}`` →
  ``{object: "list", data: [{object: "embedding", index, embedding}], model, usage}``; errors as OpenAI's
  ``{error: {message, type, param, code}}``, an invalid request 400.

A model that cannot embed (a cross-encoder) answers both with a 400 naming a model that can, and
``/openapi.json`` leaves them out: the schema describes what this deployment serves.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

import numpy as np
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import Field, create_model

from jingpai.reranker.service.embed_schemas import (
    OpenAIEmbedding,
    OpenAIEmbeddingRequest,
    OpenAIEmbeddingResponse,
    OpenAIUsage,
    TeiEmbedRequest,
    embedding_errors,
)
from jingpai.reranker.service.schemas import bounded_json_int
from jingpai.reranker.service.scoring import RerankService


def _narrowed(base: type, doc: str | None, **fields: Any) -> Any:
    # the served model is known only here: narrowing a field's type makes the schema's bound and the
    # validation one and the same (as the Cohere routes' model name)
    return create_model(base.__name__, __base__=base, __doc__=doc, **fields)


def _dimensions(dim: int | None) -> dict[str, Any]:
    if dim is None:
        return {}
    described = Field(None, description=f"keep each vector's first N of its {dim} components, then normalize")
    return {"dimensions": (bounded_json_int(dim) | None, described)}


def base64_vector(vector: np.ndarray) -> str:
    """OpenAI's ``encoding_format=base64``: the vector's little-endian float32 bytes, base64-encoded."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def add_tei_embed_route(app: FastAPI, service: RerankService) -> None:
    """``POST /embed`` (TEI)."""
    dim = service.embedder.dim
    request_model = _narrowed(TeiEmbedRequest, TeiEmbedRequest.__doc__, **_dimensions(dim))

    async def tei_embed(req: TeiEmbedRequest) -> JSONResponse:
        """TEI-compatible embedding: one vector per input text, in input order."""
        vectors, _ = await service.embedder.embed(
            req.texts(), field="inputs", truncate=req.truncate is not False, normalize=req.normalize, dimensions=req.dimensions,
            cut="left" if req.truncation_direction.lower() == "left" else "right",
        )
        # straight to JSON: a response model would validate every float of every vector again
        return JSONResponse(vectors.tolist())

    tei_embed.__annotations__["req"] = request_model
    app.post(
        "/embed", response_model=list[list[float]], tags=["embed"], responses=embedding_errors("tei"), include_in_schema=dim is not None,
    )(tei_embed)


def add_openai_embeddings_route(app: FastAPI, service: RerankService) -> None:
    """``POST /v1/embeddings`` (OpenAI)."""
    dim, served = service.embedder.dim, service.model_name
    request_model = _narrowed(
        OpenAIEmbeddingRequest, OpenAIEmbeddingRequest.__doc__, **_dimensions(dim),
        model=(Literal[served] | None, Field(None, description=f"the served model's name, {served!r}, or left out")),  # type: ignore[valid-type]
    )

    async def openai_embeddings(req: OpenAIEmbeddingRequest) -> JSONResponse:
        """OpenAI-compatible embeddings: unit vectors, as numbers or base64, with the tokens embedded as usage."""
        # OpenAI's embeddings are unit vectors; a text over max_length is cut, as /info's auto_truncate says
        vectors, tokens = await service.embedder.embed(req.texts(), field="input", dimensions=req.dimensions)
        encode = base64_vector if req.encoding_format == "base64" else np.ndarray.tolist
        # constructed, not validated: the vectors are the service's own floats (see /embed)
        data = [OpenAIEmbedding.model_construct(object="embedding", index=i, embedding=encode(v)) for i, v in enumerate(vectors)]
        usage = OpenAIUsage.model_construct(prompt_tokens=tokens, total_tokens=tokens)
        body = OpenAIEmbeddingResponse.model_construct(object="list", data=data, model=served, usage=usage)
        return JSONResponse(body.model_dump())

    openai_embeddings.__annotations__["req"] = request_model
    app.post(
        "/v1/embeddings", response_model=OpenAIEmbeddingResponse, tags=["embed"], responses=embedding_errors("openai"),
        include_in_schema=dim is not None,
    )(openai_embeddings)


def add_embed_routes(app: FastAPI, service: RerankService) -> None:
    """Both embedding routes, in the order ``/openapi.json`` lists them."""
    add_tei_embed_route(app, service)
    add_openai_embeddings_route(app, service)


__all__ = ["add_embed_routes", "add_openai_embeddings_route", "add_tei_embed_route", "base64_vector"]
