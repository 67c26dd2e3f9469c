"""``jingpai tune --hybrid``: the hybrid first stage's fusion and BM25 weight, measured like the rerank fusion.

Each query's hybrid candidates are fetched **once** through the gateway (:func:`fetch_candidates`): a hybrid
search with ``rrf`` at BM25 weight 0 and ``k`` = depth, ``size`` = 2 × depth, not reranked. At weight 0 every kNN
hit ranks before every BM25-only hit and BM25-only hits keep BM25's order, so the answer holds the whole kNN list
and at least BM25's top ``depth``, each hit with its ``_jingpai.bm25_rank``, ``bm25_score``, ``knn_rank`` and
``knn_score``. Every hybrid fusion × weight is then fused offline from those lists with
:class:`~jingpai.reranker.fusion.ListFusion`, the class the gateway runs (:func:`hybrid_rows`).

The rows measure the first stage itself (no rerank): what the hybrid weight decides is which candidates reach the
rerank window. ``knn`` is the kNN list alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from jingpai.reranker.fusion import ListFusion

# the tuning's own types (TuneSettings, QueryRuns, TuneRow) are :mod:`jingpai.plugin.tune`'s, which imports this
# module: they are passed in, not imported, so the two modules form no import cycle
TuneSettings = QueryRuns = TuneRow = Any

logger = logging.getLogger(__name__)

Candidate = tuple[str, int | None, float | None, int | None, float | None]


def fetch_candidates(search: Callable[..., dict], body: dict, depth: int, *, qid: str) -> list[Candidate] | None:
    """A query's hybrid candidates ``(id, bm25_rank, bm25_score, knn_rank, knn_score)`` (``None``: the gateway
    did not run it hybrid, logged; its hybrid rows use BM25's order)."""
    hybrid = {"enabled": True, "k": depth, "fusion": "rrf", "weight": 0.0}
    answer = search({**body, "size": 2 * depth, "ext": {"jingpai": {"hybrid": hybrid}}}, jingpai="augment")
    info = answer["jingpai"].get("hybrid") or {"reason": "index_without_vectors"}
    if not info.get("applied"):
        logger.warning("query %s was not run hybrid (%s): its hybrid rows use BM25's order", qid, info.get("reason"))
        return None
    out: list[Candidate] = []
    for hit in answer["hits"]["hits"]:
        j = hit.get("_jingpai") or {}
        out.append((hit["_id"], j.get("bm25_rank"), j.get("bm25_score"), j.get("knn_rank"), j.get("knn_score")))
    return out


def lists_of(candidates: Sequence[Candidate], depth: int) -> tuple[list[tuple[str, float | None]], list[tuple[str, float | None]]]:
    """BM25's top ``depth`` and the kNN list, each in its own order.

    >>> lists_of([("a", 2, 3.0, 1, 0.9), ("b", 1, 5.0, None, None), ("c", None, None, 2, 0.8)], 10)
    ([('b', 5.0), ('a', 3.0)], [('a', 0.9), ('c', 0.8)])
    """
    bm25 = sorted((c for c in candidates if c[1] is not None and c[1] <= depth), key=lambda c: c[1])  # type: ignore[arg-type, return-value]
    knn = sorted((c for c in candidates if c[3] is not None), key=lambda c: c[3])  # type: ignore[arg-type, return-value]
    return [(c[0], c[2]) for c in bm25], [(c[0], c[4]) for c in knn]


def hybrid_grid(settings: TuneSettings) -> list[tuple[str, ListFusion]]:
    """Every hybrid fusion measured: ``linear`` at each weight, ``rrf`` at each k × weight (weights are BM25's)."""
    specs = [("hybrid-linear", ListFusion(mode="linear", weight=w)) for w in settings.weights]
    return specs + [("hybrid-rrf", ListFusion(mode="rrf", weight=w, rrf_k=k)) for k in settings.rrf_ks for w in settings.weights]


def hybrid_rows(settings: TuneSettings, runs: Sequence[QueryRuns], metrics: Callable[[dict[str, list[str]]], dict[str, float]], *,
                row: Callable[..., TuneRow]) -> list[TuneRow]:
    """The ``knn`` row (the kNN list alone), then one row per hybrid fusion × weight (``window`` ``None``);
    ``row`` builds a row (:class:`jingpai.plugin.tune.TuneRow`)."""
    depth = settings.depth

    def ranking(run: QueryRuns, fusion: ListFusion | None) -> list[str]:
        if run.hybrid is None:
            return run.augmented[:depth]
        bm25, knn = lists_of(run.hybrid, depth)
        if fusion is None:
            return [doc for doc, _ in knn][:depth]
        return [c.id for c in fusion.fuse(bm25, knn)][:depth]

    rows = [row("knn", None, None, None, metrics({r.query.qid: ranking(r, None) for r in runs}))]
    for name, fusion in hybrid_grid(settings):
        rankings = {r.query.qid: ranking(r, fusion) for r in runs}
        rows.append(row(name, None, fusion.weight, fusion.rrf_k if fusion.mode == "rrf" else None, metrics(rankings)))
    return rows


def best_hybrid(rows: Sequence[TuneRow], metric: str) -> TuneRow | None:
    """The hybrid row with the highest ``metric`` (ties: the larger kNN weight); ``None``: no hybrid rows."""
    candidates = [r for r in rows if r.fusion.startswith("hybrid-")]
    if not candidates:
        return None
    return max(candidates, key=lambda r: (round(r.metrics[metric], 12), -(r.weight or 0.0)))


def settings_lines(row: TuneRow) -> dict[str, Any]:
    """The gateway settings of a hybrid row (``hybrid_fusion``, ``hybrid_weight``, ``hybrid_rrf_k``)."""
    values: dict[str, Any] = {"hybrid_fusion": row.fusion.removeprefix("hybrid-"), "hybrid_weight": row.weight}
    if row.rrf_k is not None:
        values["hybrid_rrf_k"] = row.rrf_k
    return values


__all__ = ["best_hybrid", "fetch_candidates", "hybrid_grid", "hybrid_rows", "lists_of", "settings_lines"]
