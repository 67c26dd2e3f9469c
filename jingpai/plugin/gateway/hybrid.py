"""The hybrid first stage: on an index with document vectors (``jingpai index --vectors``), a search's
full-text query also runs as a kNN search with the query text's vector, and the two candidate lists are
fused (:class:`~jingpai.reranker.fusion.ListFusion`) into the hits that are then reranked as before.

Two requests fused here, on both engines. OpenSearch's native hybrid query needs the neural-search plugin and a
search pipeline, which jingpai does not install. Elasticsearch's top-level ``knn`` next to ``query`` *sums* the
raw BM25 score (unbounded) and the vector similarity (in [0, 1]): a third fusion whose meaning changes with
every query's BM25 scale, which neither ``rrf`` nor ``linear`` here is, and which OpenSearch could not
reproduce. One code path keeps the fused lists identical in meaning on both engines, and lets each list fail
on its own: the kNN list is the one that may fail open.

- :func:`plan_hybrid` (planning, no I/O): whether a search runs hybrid, and the kNN request's parameters
  (:class:`HybridPlan`), or why not (``jingpai.hybrid.reason``);
- :class:`HybridSearcher` (I/O): embeds the query text (:class:`~jingpai.plugin.embed_client.EmbedClient`)
  and runs the kNN search with the client's headers; every failure becomes a fail-open reason;
- :func:`fuse_hits` (pure): the engine's BM25 answer with the kNN hits fused in, each hit's
  ``_jingpai.sources`` naming the list(s) it came from;
- :func:`rerank_split` (pure): which of the fused hits a reranked search reranks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from jingpai.engine.vectors import VectorIndex, knn_body
from jingpai.plugin.embed_client import EmbedClient, EmbedUnavailable
from jingpai.plugin.gateway.proxy import Upstream, dumps, path_part
from jingpai.plugin.settings import GatewaySettings, HybridSpec, setting_hint
from jingpai.reranker.fusion import ListFusion

# the whole gateway logs under one name, as before it was a package (operators' logging configs name it)
logger = logging.getLogger(__package__)

#: why the kNN list is missing besides the embedder's reasons (:data:`~jingpai.plugin.embed_client.EMBED_REASONS`):
#: the engine answered the kNN search with an error, timed out, or could not be reached
KNN_REASONS: tuple[str, ...] = ("knn_error", "knn_timeout", "knn_unreachable")
#: the body members of a search that shape its hits, carried over to its kNN search
_HIT_SHAPE = ("_source", "fields", "docvalue_fields", "stored_fields", "version", "seq_no_primary_term")

#: ``(method, path, headers, body, hop) -> answer``: the engine hop, with the client's headers
Fetch = Callable[[str, str, list[tuple[str, str]], bytes, str], Awaitable[Upstream]]


@dataclass(frozen=True)
class HybridPlan:
    """The kNN half of a hybrid search, decided at planning."""

    index: str
    field: str
    dims: int | None
    text: str
    #: the identity of the model the index's vectors come from (``None``: the index does not say)
    model: str | None
    k: int
    num_candidates: int
    fusion: ListFusion
    #: the client query's non-scoring clauses (``bool.filter``, ``bool.must_not``, ``post_filter``)
    filter: dict | None
    #: the BM25 request's members that shape hits (``_source`` …), the vector field excluded
    shape: dict
    #: which hits a reranked search reranks (:class:`~jingpai.plugin.settings.HybridSpec`)
    rerank_window: str = "fused"
    #: how the index's vector field is indexed (``IndexMeta.vector_index``): ``flat`` is searched exactly
    vector_index: VectorIndex = "hnsw"

    def info(self, **overrides: Any) -> dict[str, Any]:
        """The response's ``jingpai.hybrid`` object of a search planned hybrid."""
        return {"applied": True, "reason": None, "fusion": self.fusion.describe(), "k": self.k, "rerank_window": self.rerank_window,
                **overrides}


def not_applied(reason: str) -> dict[str, Any]:
    """The ``jingpai.hybrid`` object of a search on an index with vectors that was not run hybrid."""
    return {"applied": False, "reason": reason}


def exclude_vector(body: dict, field: str) -> None:
    """Leave ``field`` out of the hits' ``_source`` (in place; ``_source: false`` stays as it is)."""
    source = body.get("_source")
    if source is False or source == "false":
        return
    if source in (None, True, "true"):
        body["_source"] = {"excludes": [field]}
    elif isinstance(source, (str, list)):
        includes = [source] if isinstance(source, str) else list(source)
        body["_source"] = {"includes": includes, "excludes": [field]}
    elif isinstance(source, dict):
        excludes = source.get("excludes", source.get("exclude", []))
        excludes = [excludes] if isinstance(excludes, str) else list(excludes)
        body["_source"] = {k: v for k, v in source.items() if k != "exclude"} | {"excludes": [*excludes, field]}


def knn_filter(query: Any, post_filter: Any) -> dict | None:
    """The non-scoring clauses of a client's search, as one filter for its kNN search: a top-level ``bool``'s
    ``filter`` and ``must_not`` and the search's ``post_filter`` (scoring clauses are BM25's own).

    >>> knn_filter({"bool": {"must": [{"match": {"t": "x"}}], "must_not": [{"ids": {"values": ["a"]}}]}}, None)
    {'bool': {'must_not': [{'ids': {'values': ['a']}}]}}
    >>> knn_filter({"match": {"t": "x"}}, None) is None
    True
    """
    clauses: dict[str, list] = {"filter": [], "must_not": []}
    if isinstance(query, dict) and isinstance(query.get("bool"), dict):
        for key in clauses:
            value = query["bool"].get(key)
            clauses[key] += value if isinstance(value, list) else [value] if isinstance(value, dict) else []
    if isinstance(post_filter, dict):
        clauses["filter"].append(post_filter)
    kept = {key: value for key, value in clauses.items() if value}
    return {"bool": kept} if kept else None


def plan_hybrid(index: str, body: dict, query: Any, text: str, spec: HybridSpec, meta_field: str, dims: int | None,
                depth: int, *, model: str | None = None, vector_index: VectorIndex | None = None) -> HybridPlan:
    """The kNN half of a hybrid search whose BM25 list is ``depth`` hits deep (``body``: the BM25 request,
    its ``_source`` already excluding the vector field; ``query``: the client's query before augmentation)."""
    k, num_candidates = spec.neighbours(depth)
    shape = {key: body[key] for key in _HIT_SHAPE if key in body}
    return HybridPlan(index=index, field=meta_field, dims=dims, text=text, model=model, k=k, num_candidates=num_candidates, fusion=spec.fusion,
                      filter=knn_filter(query, body.get("post_filter")), shape=shape, rerank_window=spec.rerank_window,
                      vector_index=vector_index or "hnsw")


@dataclass(frozen=True)
class KnnOutcome:
    """The kNN list of one search, or why it is missing (``reason``: the fail-open reason)."""

    hits: list[dict] | None
    reason: str | None = None
    took_embed_ms: float | None = None
    took_knn_ms: float | None = None


class HybridSearcher:
    """Embeds a query and runs its kNN search on the engine (the gateway's :class:`EmbedClient` and engine hop).

    Args:
        fetch: the engine hop; it is called with the client's own headers.
        kind: the engine's kind once the proxy has seen an answer (``None``: not known yet).
    """

    def __init__(self, settings: GatewaySettings, *, fetch: Fetch, kind: Callable[[], str | None]) -> None:
        url = settings.embedder_url
        self.client = EmbedClient(url, timeout_ms=settings.embed_timeout_ms, max_answer_bytes=settings.max_answer_bytes) if url else None
        self._fetch = fetch
        self._kind = kind

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    async def knn(self, plan: HybridPlan, headers: list[tuple[str, str]], *, log: bool = True) -> KnnOutcome:
        """The kNN hits of ``plan`` (never raises: a failure is the outcome's ``reason``, logged unless ``log`` is off)."""
        assert self.client is not None  # planned hybrid only with an embedder
        started = time.perf_counter()
        try:
            vector = await self.client.embed(plan.text, dims=plan.dims, model=plan.model)
        except EmbedUnavailable as exc:
            hint = f"; to let the embedder finish raise {setting_hint('embed_timeout_ms')}" if exc.reason == "embed_timeout" else ""
            return self._failed(exc.reason, f"{exc}{hint}", started, None, log=log)
        embedded = time.perf_counter()
        took_embed = round((embedded - started) * 1000, 2)
        kind = self._kind() or "opensearch"
        body = knn_body(kind, vector, field=plan.field, k=plan.k, num_candidates=plan.num_candidates, filter=plan.filter,  # type: ignore[arg-type]
                        index=plan.vector_index)
        body.update(plan.shape)
        try:
            resp = await self._fetch("POST", f"/{path_part(plan.index)}/_search", headers, dumps(body), "knn")
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            return self._failed("knn_timeout", f"the kNN search on {plan.index!r} timed out: {exc}", embedded, took_embed, log=log)
        except aiohttp.ClientError as exc:
            return self._failed("knn_unreachable", f"{type(exc).__name__}: {exc}", embedded, took_embed, log=log)
        took_knn = round((time.perf_counter() - embedded) * 1000, 2)
        if resp.status_code != 200:
            detail = f"the engine answered the kNN search on {plan.index!r} with HTTP {resp.status_code}: {resp.content[:300]!r}"
            return self._failed("knn_error", detail, embedded, took_embed, log=log)
        hits = ((resp.json().get("hits") or {}).get("hits")) or []
        return KnnOutcome(hits=hits, took_embed_ms=took_embed, took_knn_ms=took_knn)

    @staticmethod
    def _failed(reason: str, detail: str, since: float, took_embed: float | None, *, log: bool) -> KnnOutcome:
        if log:
            logger.warning("serving BM25 hits alone (hybrid fail-open): %s", detail if detail.startswith(reason) else f"{reason}: {detail}")
        took = round((time.perf_counter() - since) * 1000, 2)
        if took_embed is None:
            return KnnOutcome(hits=None, reason=reason, took_embed_ms=took)
        return KnnOutcome(hits=None, reason=reason, took_embed_ms=took_embed, took_knn_ms=took)


def _key(hit: dict) -> str:
    return f"{hit.get('_index', '')}\x00{hit.get('_id', '')}"


def fuse_hits(plan: HybridPlan, data: dict, outcome: KnnOutcome) -> dict[str, Any]:
    """Fuse ``outcome``'s kNN hits into the engine's BM25 answer ``data`` (in place) and return the response's
    ``jingpai.hybrid`` object. Each fused hit's ``_score`` is the fused score and its ``_jingpai`` says where it
    came from: ``{sources, bm25_rank, bm25_score, knn_rank, knn_score}`` (ranks 1-based; ``None``: not in
    that list). A missing kNN list leaves ``data`` as it is (BM25 alone)."""
    hits_obj = data.get("hits")
    bm25 = (hits_obj.get("hits") or []) if isinstance(hits_obj, dict) else []
    timing = {"took_embed_ms": outcome.took_embed_ms, "took_knn_ms": outcome.took_knn_ms}
    if outcome.hits is None or not isinstance(hits_obj, dict):
        return {**not_applied(outcome.reason or "knn_error"), "bm25_hits": len(bm25), **timing}
    by_key: dict[str, dict] = {}
    for hit in [*bm25, *outcome.hits]:
        by_key.setdefault(_key(hit), hit)
    fused = plan.fusion.fuse([(_key(h), h.get("_score")) for h in bm25], [(_key(h), h.get("_score")) for h in outcome.hits])
    merged: list[dict] = []
    for candidate in fused:
        hit = by_key[candidate.id]
        (bm25_rank, knn_rank), (bm25_score, knn_score) = candidate.ranks, candidate.scores
        sources = [name for name, rank in (("bm25", bm25_rank), ("knn", knn_rank)) if rank is not None]
        hit["_score"] = candidate.score
        hit["_jingpai"] = {"sources": sources, "bm25_rank": bm25_rank, "bm25_score": bm25_score, "knn_rank": knn_rank,
                           "knn_score": knn_score}
        merged.append(hit)
    hits_obj["hits"] = merged
    hits_obj["max_score"] = merged[0]["_score"] if merged else None
    return plan.info(bm25_hits=len(bm25), knn_hits=len(outcome.hits), **timing)


def rerank_split(hits: list[dict], window: int, rerank_window: str) -> tuple[list[dict], list[dict]]:
    """``(reranked, rest)``: the hits a reranked search reranks and the others, each in the fused order.

    ``fused``: the first ``window``. ``both``: every hit within the top ``window`` of the BM25 list or of the
    kNN list (``_jingpai``'s ranks, set by :func:`fuse_hits`), so nothing BM25 + rerank would have reranked is
    cut by the fusion; a search whose kNN list is missing (fail-open, no ranks) reranks its first ``window``.

    >>> hits = [{"_id": "a", "_jingpai": {"bm25_rank": 1, "knn_rank": None}}, {"_id": "b", "_jingpai": {"bm25_rank": None, "knn_rank": 3}},
    ...         {"_id": "c", "_jingpai": {"bm25_rank": 2, "knn_rank": None}}]
    >>> [[h["_id"] for h in part] for part in rerank_split(hits, 2, "both")]
    [['a', 'c'], ['b']]
    >>> [[h["_id"] for h in part] for part in rerank_split(hits, 2, "fused")]
    [['a', 'b'], ['c']]
    """
    if rerank_window == "fused" or not any("_jingpai" in h for h in hits):
        return hits[:window], hits[window:]

    def inside(hit: dict) -> bool:
        ranks = hit.get("_jingpai") or {}
        return in_both_windows(ranks.get("bm25_rank"), ranks.get("knn_rank"), window)

    return [h for h in hits if inside(h)], [h for h in hits if not inside(h)]


def in_both_windows(bm25_rank: int | None, knn_rank: int | None, window: int) -> bool:
    """Whether a hit with these list ranks (``None``: not in that list) is reranked under ``rerank_window`` ``both``:
    within the top ``window`` of the BM25 list or of the kNN list.

    >>> in_both_windows(None, 3, 5), in_both_windows(6, None, 5), in_both_windows(None, None, 5)
    (True, False, False)
    """
    return any(rank is not None and rank <= window for rank in (bm25_rank, knn_rank))


__all__ = ["KNN_REASONS", "HybridPlan", "HybridSearcher", "KnnOutcome", "exclude_vector", "fuse_hits", "in_both_windows", "knn_filter", "not_applied",
           "plan_hybrid", "rerank_split"]
