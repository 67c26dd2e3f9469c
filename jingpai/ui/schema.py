"""The JSON shapes of the UI API (``/_jingpai/ui/api/indices`` and ``/_jingpai/ui/api/search``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class SearchParams(BaseModel):
    """Query parameters of ``GET /_jingpai/ui/api/search``."""

    q: str = Field(min_length=1, max_length=512)
    index: str = Field(min_length=1, max_length=255)
    size: int | None = Field(default=None, ge=1)
    augment: bool = True
    rerank: bool = True


class Segment(BaseModel):
    """A run of text; ``kw`` marks an occurrence of one of the query's dictionary keywords."""

    text: str
    kw: bool = False


class UiHit(BaseModel):
    """One hit as a column shows it.

    ``engine_score`` is the engine's ``_score`` (in a reranked column: of the augmented query, before
    fusion), ``model_score`` the reranker's score and ``fused_score`` the gateway's fused ``_score`` that
    orders the reranked column; the last two are ``None`` for a hit that was not reranked.
    """

    id: str
    rank: int
    title: list[Segment] = Field(default_factory=list)
    snippet: list[Segment] = Field(default_factory=list)
    category: str | None = None
    date: str | None = None
    engine_score: float | None = None
    engine_rank: int | None = None
    model_score: float | None = None
    fused_score: float | None = None
    moved: int | None = None
    new: bool = False
    #: the hybrid first stage's list(s) the hit came from (``["bm25", "knn"]`` …); ``None``: not a hybrid search
    sources: list[str] | None = None


class Column(BaseModel):
    """One column: the request's mode and its hits."""

    mode: Literal["off", "augment", "rerank"]
    hits: list[UiHit] = Field(default_factory=list)
    total: int | None = None
    took_ms: float | None = None


class SearchResponse(BaseModel):
    """Both orders of one query."""

    query: str
    index: str
    keywords: list[str] = Field(default_factory=list)
    engine: Column
    jingpai: Column
    reranked: bool = False
    reason: str | None = None
    augmented: bool = False
    model: str | None = None
    took_rerank_ms: float | None = None
    #: the fusion the gateway ran (its response's ``jingpai.fusion``, e.g. ``{"mode": "linear", "weight": 0.5}``)
    fusion: dict[str, Any] | None = None
    banner: str | None = None


class IndexChoice(BaseModel):
    name: str
    jingpai: bool = False
    text_fields: list[str] = Field(default_factory=list)


class IndicesResponse(BaseModel):
    indices: list[IndexChoice] = Field(default_factory=list)
    default: str | None = None
    banner: str | None = None


__all__ = ["Column", "IndexChoice", "IndicesResponse", "SearchParams", "SearchResponse", "Segment", "UiHit"]
