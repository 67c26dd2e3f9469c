"""Finishing one search: rerank the window of the engine's answer, fuse the scores, cut the page, take the
``_source`` folding back out, add the ``jingpai`` object and apply the client's ``filter_path``.

Hits past the window keep the engine's order and score, so paging with ``from``/``size`` never repeats or
skips a hit. Every reranker failure fails open: the engine's order of the same page is served, with the
reason in ``jingpai.reason``.

A hybrid search's answer arrives here with its kNN hits already fused in (:func:`~.hybrid.fuse_hits`): the
"engine's order" is then the fused first-stage order, and ``jingpai.hybrid`` says whether the kNN list made it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from jingpai.plugin.gateway.hybrid import rerank_split
from jingpai.plugin.gateway.plan import SearchPlan
from jingpai.plugin.gateway.rerank import BoundedReranker, fail_open_hint
from jingpai.plugin.gateway.source import doc_text, stored_keywords, unfold_page
from jingpai.plugin.rerank_client import RerankUnavailable
from jingpai.reranker.fusion import fused_order

# the whole gateway logs under one name, as before it was a package (operators' logging configs name it)
logger = logging.getLogger(__package__)


@dataclass(frozen=True)
class Finished:
    """A finished search answer and its ``jingpai.reason`` (``None``: reranked, or no reason to give)."""

    data: dict
    reason: str | None


def _page(plan: SearchPlan, hits: list[dict]) -> list[dict]:
    page = hits[plan.from_ : plan.from_ + plan.size]
    unfold_page(page, plan.source)
    return page


def _done(plan: SearchPlan, data: dict, **info) -> Finished:
    data["jingpai"] = plan.info(**info)
    reason = data["jingpai"]["reason"]
    return Finished(plan.filter_path.apply(data) if plan.filter_path is not None else data, reason)


async def finish(plan: SearchPlan, data: dict, reranker: BoundedReranker | None, *, doc_chars: int,
                 slots: tuple[asyncio.Semaphore, ...] = (), log: bool = True, hybrid: dict | None = None) -> Finished:
    """Rerank the window of an engine response (when planned), cut the page, add ``jingpai`` and apply the
    client's ``filter_path``. ``data`` is the engine's parsed answer and is changed in place.

    Args:
        doc_chars: each document's text is cut to this many characters.
        slots: bounds to hold while calling the reranker besides the gateway-wide one (an ``_msearch``'s own).
        log: log a fail-open here (an ``_msearch`` logs one summary instead).
        hybrid: the ``jingpai.hybrid`` object of a hybrid search (its hits already fused).
    """
    extra = {"hybrid": hybrid} if hybrid is not None else {}
    if not isinstance(data.get("hits"), dict):
        return _done(plan, data, **extra)
    if not plan.rerank:
        if plan.hybrid is not None:  # fetched from 0 to cut the page from the fused list
            data["hits"]["hits"] = _page(plan, data["hits"].get("hits") or [])
        return _done(plan, data, **extra)
    hits: list[dict] = data["hits"].get("hits") or []
    if not hits:
        data["hits"]["hits"] = []
        return _done(plan, data, reason="no_hits", **extra)
    assert reranker is not None and plan.fusion is not None
    window, rest = rerank_split(hits, plan.window, plan.hybrid.rerank_window if plan.hybrid is not None else "fused")
    texts = [doc_text(h, plan.fields, doc_chars) for h in window]
    if not any(texts):
        # every document would score as the empty text: no ranking signal, so none is claimed
        logger.warning("not reranking: none of the %d hits has text in %s", len(window), list(plan.fields))
        data["hits"]["hits"] = _page(plan, hits)
        return _done(plan, data, reason="no_document_text", **extra)
    keywords = None
    if plan.rerank_keywords is not None:
        stored = plan.rerank_keywords
        words = [stored_keywords(h, stored.field, t) for h, t in zip(window, texts, strict=True)]
        if any(w is not None for w in words):
            keywords = {"dictionary_version": stored.dict_version, "top_k": stored.top_k, "words": words}
    started = time.perf_counter()
    try:
        scores = await reranker.scores(plan.query_text, texts, slots, keywords=keywords)
    except RerankUnavailable as exc:
        if log:
            logger.warning("serving engine order (fail-open): %s%s", exc, fail_open_hint(exc.reason))
        data["hits"]["hits"] = _page(plan, hits)
        return _done(plan, data, reason=exc.reason, took_rerank_ms=round((time.perf_counter() - started) * 1000, 2), **extra)
    took = round((time.perf_counter() - started) * 1000, 2)
    engine_ranks = range(1, len(window) + 1)
    fused = plan.fusion.fuse([h.get("_score") for h in window], scores, engine_ranks=engine_ranks)
    for rank, hit in zip(engine_ranks, window):
        # a hybrid hit keeps where it came from (sources, BM25's and kNN's ranks); its engine score is the fused one
        hit["_jingpai"] = {**(hit.get("_jingpai") or {}), "engine_score": hit.get("_score"), "engine_rank": rank, "model_score": scores[rank - 1]}
        hit["_score"] = float(fused[rank - 1])
    # hits past the window keep the engine's order and score: they were not reranked
    data["hits"]["hits"] = _page(plan, [window[i] for i in fused_order(fused)] + rest)
    data["hits"]["max_score"] = float(fused.max())
    if hybrid is not None and hybrid.get("applied"):
        hybrid["reranked_hits"] = len(window)  # "both" reranks between window and 2 x window hits
    return _done(plan, data, reason=None, reranked=True, model=await reranker.model_name(), took_rerank_ms=took,
                 fusion=plan.fusion.describe(), **extra)


__all__ = ["Finished", "finish"]
