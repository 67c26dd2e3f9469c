"""``jingpai tune --hybrid``: the hybrid first stage's fusion and BM25 weight, and the rerank on top of it, measured
like the rerank fusion.

Each query's hybrid candidates are fetched **once** through the gateway (:func:`fetch_candidates`): a hybrid
search with ``rrf`` at BM25 weight 0 and ``k`` = depth, ``size`` = 2 × depth, reranked with ``fusion=replace`` over
all of them (window 2 × depth). At weight 0 every kNN hit ranks before every BM25-only hit and BM25-only hits keep
BM25's order, so the answer holds the whole kNN list and at least BM25's top ``depth``, each hit with its
``_jingpai.bm25_rank``, ``bm25_score``, ``knn_rank``, ``knn_score`` and ``model_score``. Every hybrid fusion ×
weight is then fused offline from those lists with :class:`~jingpai.reranker.fusion.ListFusion`, the class the
gateway runs, and every rerank fusion × window from those model scores with
:class:`~jingpai.reranker.fusion.FusionSpec`, as the gateway does (a bi- or cross-encoder scores each document on
its own, so a window's scores do not depend on the rest of it).

Rows:

- ``hybrid-rrf`` / ``hybrid-linear`` (:func:`hybrid_rows`): the first stage itself (no rerank) — what the hybrid
  weight decides is which candidates reach the rerank window; ``knn`` is the kNN list alone.
- the pipeline a search on an index with vectors runs (:func:`pipeline_rows`): each of those first stages, its top
  ``window`` reranked (``replace``, or ``linear`` at each engine weight, the engine score being the hybrid fusion's
  score as in the gateway), the rest of the fused list after it; and the same with ``rerank_window`` ``both`` (every
  hit within the top ``window`` of the BM25 or the kNN list reranked, as
  :func:`jingpai.plugin.gateway.hybrid.rerank_split` does). A rerank fusion chosen on BM25's windows is not the best
  one on hybrid windows (their engine scores are fused ranks, not BM25 scores), so the two are chosen together
  (:func:`jingpai.plugin.tune.best_pipeline`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from jingpai.plugin.gateway.hybrid import in_both_windows
from jingpai.reranker.fusion import FusionSpec, ListFusion, fused_order

# the tuning's own types (TuneSettings, QueryRuns, TuneRow) are :mod:`jingpai.plugin.tune`'s, which imports this
# module: they are passed in, not imported, so the two modules form no import cycle
TuneSettings = QueryRuns = TuneRow = Any

logger = logging.getLogger(__name__)

#: ``(id, bm25_rank, bm25_score, knn_rank, knn_score, model_score)`` (``model_score`` ``None``: not reranked)
Candidate = tuple[str, int | None, float | None, int | None, float | None, float | None]


def fetch_candidates(search: Callable[..., dict], body: dict, depth: int, *, qid: str) -> list[Candidate] | None:
    """A query's hybrid candidates ``(id, bm25_rank, bm25_score, knn_rank, knn_score, model_score)`` (``None``: the
    gateway did not run it hybrid, logged; its hybrid rows use BM25's order). ``model_score`` is ``None`` for every
    candidate when the rerank failed open (logged; its pipeline rows serve the hybrid order, as the gateway would)."""
    hybrid = {"enabled": True, "k": depth, "fusion": "rrf", "weight": 0.0}
    ext = {"hybrid": hybrid, "window": 2 * depth, "fusion": "replace"}
    answer = search({**body, "size": 2 * depth, "ext": {"jingpai": ext}}, jingpai="rerank")
    info = answer["jingpai"].get("hybrid") or {"reason": "index_without_vectors"}
    if not info.get("applied"):
        logger.warning("query %s was not run hybrid (%s): its hybrid rows use BM25's order", qid, info.get("reason"))
        return None
    if not answer["jingpai"].get("reranked"):
        logger.warning("query %s: the hybrid window was not reranked (%s): its pipeline rows serve the hybrid order", qid,
                       answer["jingpai"].get("reason"))
    out: list[Candidate] = []
    for hit in answer["hits"]["hits"]:
        j = hit.get("_jingpai") or {}
        out.append((hit["_id"], j.get("bm25_rank"), j.get("bm25_score"), j.get("knn_rank"), j.get("knn_score"), j.get("model_score")))
    return out


def lists_of(candidates: Sequence[Candidate], depth: int) -> tuple[list[tuple[str, float | None]], list[tuple[str, float | None]]]:
    """BM25's top ``depth`` and the kNN list, each in its own order.

    >>> lists_of([("a", 2, 3.0, 1, 0.9, None), ("b", 1, 5.0, None, None, None), ("c", None, None, 2, 0.8, None)], 10)
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


#: one hit of the gateway's hybrid list: ``(id, fused score, model score, BM25 rank, kNN rank)``
Listed = tuple[str, float, float | None, int | None, int | None]


def hybrid_list(candidates: Sequence[Candidate], fusion: ListFusion, depth: int) -> list[Listed]:
    """The gateway's hybrid list for ``fusion``, best first: ``(id, fused score, model score, BM25 rank, kNN rank)``
    over BM25's top ``depth`` and the kNN list (what a search of ``size`` = ``depth`` on an index with vectors fuses).

    >>> cands = [("a", 2, 3.0, 1, 0.9, 0.1), ("b", 1, 5.0, None, None, 0.7), ("c", None, None, 2, 0.8, 0.9)]
    >>> [(doc, round(score, 3), *rest) for doc, score, *rest in hybrid_list(cands, ListFusion(mode="linear", weight=0.5), 10)]
    [('b', 0.5, 0.7, 1, None), ('a', 0.5, 0.1, 2, 1), ('c', 0.0, 0.9, None, 2)]
    """
    bm25, knn = lists_of(candidates, depth)
    by_id = {c[0]: c for c in candidates}
    return [(c.id, c.score, by_id[c.id][5], by_id[c.id][1], by_id[c.id][3]) for c in fusion.fuse(bm25, knn)]


def reranked(hybrid: Sequence[Listed], spec: FusionSpec, window: int, depth: int, rerank_window: str = "fused") -> list[str]:
    """The ranking the gateway serves: the hybrid list's top ``window`` (``rerank_window`` ``both``: every hit
    within the top ``window`` of the BM25 or the kNN list, in the hybrid order) fused with the model by ``spec`` (its
    engine score is the hybrid fusion's), then the rest of the hybrid list, ``depth`` ids in all. A window without
    model scores (the rerank failed open) keeps the hybrid order, as the gateway serves it.

    >>> lst = [("a", 0.5, 0.1, 1, None), ("b", 0.5, 0.7, None, 1), ("c", 0.0, 0.9, 2, None)]
    >>> reranked(lst, FusionSpec(mode="replace"), 2, 10), reranked(lst, FusionSpec(mode="linear", weight=1.0), 3, 2)
    (['b', 'a', 'c'], ['a', 'b'])
    >>> reranked(lst, FusionSpec(mode="replace"), 1, 10, "both")
    ['b', 'a', 'c']
    """
    if rerank_window == "both":  # the gateway's own rule (rerank_split)
        head = [h for h in hybrid if in_both_windows(h[3], h[4], window)]
        rest = [h for h in hybrid if not in_both_windows(h[3], h[4], window)]
    else:
        head, rest = list(hybrid[:window]), list(hybrid[window:])
    if any(h[2] is None for h in head):
        return [h[0] for h in hybrid][:depth]
    fused = spec.fuse([h[1] for h in head], [h[2] for h in head], engine_ranks=range(1, len(head) + 1))  # type: ignore[misc]
    order = [head[i][0] for i in fused_order(fused)]
    return (order + [h[0] for h in rest])[:depth]


def pipeline_rows(settings: TuneSettings, runs: Sequence[QueryRuns], metrics: Callable[[dict[str, list[str]]], dict[str, float]], *,
                  row: Callable[..., TuneRow], bm25_ranking: Callable[[QueryRuns, FusionSpec, int, int], list[str]]) -> list[TuneRow]:
    """One row per hybrid first stage (:func:`hybrid_grid`) × window × rerank fusion (``replace``, ``linear`` at
    each engine weight) × ``rerank_window`` (``fused``, ``both``), each row's ``first_stage`` naming its hybrid
    fusion. A query the gateway did not run hybrid gets ``bm25_ranking(run, spec, window, depth)``: its BM25 window
    reranked by the same fusion (what the gateway serves then; :func:`jingpai.plugin.tune.fused_ranking`)."""
    depth = settings.depth
    specs = [FusionSpec(mode="replace")] + [FusionSpec(mode="linear", weight=w) for w in settings.weights]
    rows = []
    for _, first in hybrid_grid(settings):
        lists = {r.query.qid: None if r.hybrid is None else hybrid_list(r.hybrid, first, depth) for r in runs}
        for window in settings.windows:
            for spec in specs:
                for rerank_window in ("fused", "both"):
                    rankings = {}
                    for r in runs:
                        served = lists[r.query.qid]
                        rankings[r.query.qid] = (bm25_ranking(r, spec, window, depth) if served is None
                                                 else reranked(served, spec, window, depth, rerank_window))
                    weight = None if spec.mode == "replace" else spec.weight
                    rows.append(row(spec.mode, window, weight, None, metrics(rankings), first_stage=first, rerank_window=rerank_window))
    return rows


def best_hybrid(rows: Sequence[TuneRow], metric: str) -> TuneRow | None:
    """The hybrid row with the highest ``metric`` (ties: the larger kNN weight); ``None``: no hybrid rows."""
    candidates = [r for r in rows if r.fusion.startswith("hybrid-")]
    if not candidates:
        return None
    return max(candidates, key=lambda r: (round(r.metrics[metric], 12), -(r.weight or 0.0)))


def settings_lines(row: TuneRow) -> dict[str, Any]:
    """The gateway settings of a hybrid row (``hybrid_fusion``, ``hybrid_weight``, ``hybrid_rrf_k``), or of a hybrid
    + rerank row's first stage and ``hybrid_rerank_window``."""
    if row.first_stage is not None:
        first: ListFusion = row.first_stage
        return {"hybrid_fusion": first.mode, "hybrid_weight": first.weight, **({"hybrid_rrf_k": first.rrf_k} if first.mode == "rrf" else {}),
                "hybrid_rerank_window": row.rerank_window or "fused"}
    values: dict[str, Any] = {"hybrid_fusion": row.fusion.removeprefix("hybrid-"), "hybrid_weight": row.weight}
    if row.rrf_k is not None:
        values["hybrid_rrf_k"] = row.rrf_k
    return values


__all__ = ["Listed", "best_hybrid", "fetch_candidates", "hybrid_grid", "hybrid_list", "hybrid_rows", "lists_of", "pipeline_rows",
           "reranked", "settings_lines"]
