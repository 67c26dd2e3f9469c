"""``jingpai tune``: measure the gateway's fusion settings on labelled queries and pick the best.

The real gateway (:func:`jingpai.plugin.gateway.create_app`) runs in-process in front of the engine and the reranker.
For each labelled query it fetches, through the gateway:

- the engine's order (``?jingpai=off``) and the augmented order (``?jingpai=augment``), ``depth`` hits;
- the reranked window **once**, at the largest window, with ``fusion=replace``: each hit's
  ``_jingpai.engine_rank``, ``engine_score`` and ``model_score``.

Every fusion of the grid (``replace``, ``linear`` over weights, ``rrf`` over k × weights) and every smaller window are
then computed offline with :mod:`jingpai.reranker.fusion` — the module the gateway itself uses — from those scores (a
smaller window is the first W engine ranks of the largest; a cross-encoder scores each document on its own), followed
by the augmented hits past the window as the gateway serves them. So the grid costs one rerank per query.

With ``hybrid`` (an index built with ``jingpai index --vectors``), each query also fetches its hybrid candidates once,
reranked, and every hybrid fusion, alone and reranked (either rerank window), is computed offline (:mod:`jingpai.plugin.tune_hybrid`).

Labelled queries (:mod:`jingpai.plugin.tune_labels`) come from a pairs file (``q1<TAB>q2<TAB>label``, any :func:`jingpai.reranker.data.read_pairs` format:
every distinct question is expected in the index; each positive pair searches q1 with q1's own document excluded and
looks for q2) or from TREC qrels + a queries file (``qid<TAB>text``; qrels name the index's ``_id``\\ s). Metrics (P@k,
MRR, nDCG@10, MAP over the ``depth`` hits served) come from :func:`jingpai.reranker.evaluate.evaluate_rankings`
(trec_eval semantics: P@k is relevant-in-top-k / k).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jingpai.engine.auth import EngineAuth
from jingpai.plugin.tune_labels import LabelledQuery, TuneError, queries_from_pairs, queries_from_trec
from jingpai.reranker.fusion import FusionSpec, ListFusion, fused_order

logger = logging.getLogger(__name__)

#: metric names of a tuning row, in table order
METRICS: tuple[str, ...] = ("P@1", "P@3", "P@5", "P@10", "MRR", "nDCG@10", "MAP")
CUTOFFS: tuple[int, ...] = (1, 3, 5, 10)


@dataclass(frozen=True)
class TuneSettings:
    """What ``jingpai tune`` measures.

    Args:
        engine_url: the engine holding ``index``.
        index: the jingpai index (or alias) searched.
        reranker_url: ``jingpai serve``.
        dict_dirs: keyword dictionaries for the gateway's augmentation.
        windows: rerank windows tried.
        weights: engine weights tried for ``linear`` and ``rrf``.
        rrf_ks: RRF constants tried.
        metric: the metric that picks the best settings (ties: larger model weight, then smaller window).
        text_field: the indexed text field queried (``None``: the index's first text field).
        limit: evaluate at most this many queries.
        concurrency: searches sent to the gateway at once.
        base: gateway settings (a ``--config`` file's) the tuning gateway and the written file start from.
        hybrid: also measure the hybrid first stage (BM25 + kNN) over ``weights`` (BM25's) × ``rrf`` / ``linear``, and
            each of them reranked (:mod:`jingpai.plugin.tune_hybrid`).
        embed_url: the embedding service of the hybrid searches (``None``: ``reranker_url``).
        auth: who the tuning is to the engine: the in-process gateway forwards its ``Authorization`` header like a
            client's and trusts its CA file (``None``: no credentials, the system's CAs, or ``base``'s ``engine_ca_file``).
    """

    engine_url: str
    index: str
    reranker_url: str
    dict_dirs: tuple[Path, ...] = ()
    windows: tuple[int, ...] = (10, 20, 50)
    weights: tuple[float, ...] = tuple(round(i / 10, 1) for i in range(11))
    rrf_ks: tuple[int, ...] = (10, 30, 60)
    metric: str = "P@1"
    text_field: str | None = None
    limit: int | None = None
    concurrency: int = 4
    base: dict[str, Any] = field(default_factory=dict)
    hybrid: bool = False
    embed_url: str | None = None
    auth: EngineAuth | None = None

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise TuneError(f"--metric must be one of {', '.join(METRICS)}, got {self.metric!r}")
        if not self.windows or any(w < 1 for w in self.windows):
            raise TuneError(f"windows must be integers >= 1, got {list(self.windows)}")
        if not self.weights or any(not 0.0 <= w <= 1.0 for w in self.weights):
            raise TuneError(f"weights must lie in [0, 1] (the engine's weight), got {list(self.weights)}")
        if not self.rrf_ks or any(k < 1 for k in self.rrf_ks):
            raise TuneError(f"rrf_ks must be integers >= 1, got {list(self.rrf_ks)}")
        if self.concurrency < 1 or (self.limit is not None and self.limit < 1):
            raise TuneError("concurrency and limit must be >= 1")
        object.__setattr__(self, "windows", tuple(sorted(set(self.windows))))

    @property
    def depth(self) -> int:
        """Hits ranked per query for every row: the largest window, and at least 10 (for P@10, nDCG@10)."""
        return max(max(self.windows), max(CUTOFFS))


@dataclass
class QueryRuns:
    """What the gateway answered for one query."""

    query: LabelledQuery
    engine: list[str]
    augmented: list[str]
    #: the reranked window in the engine's (augmented) order: ``(id, engine_score, model_score)``
    window: list[tuple[str, float | None, float]] | None
    #: the hybrid first stage's candidates: ``(id, bm25_rank, bm25_score, knn_rank, knn_score, model_score)`` (``None``:
    #: not fetched)
    hybrid: list[tuple[str, int | None, float | None, int | None, float | None, float | None]] | None = None


@dataclass(frozen=True)
class TuneRow:
    """One measured setting: ``fusion`` is ``engine``/``augmented`` for the two baselines."""

    fusion: str
    window: int | None
    weight: float | None
    rrf_k: int | None
    metrics: dict[str, float]
    #: the hybrid first stage whose window this row reranked (``None``: BM25's window), and which of its hits the
    #: window held (``fused``: its top ``window``; ``both``: the top ``window`` of either list, the gateway's ``hybrid_rerank_window``)
    first_stage: ListFusion | None = None
    rerank_window: str | None = None

    @property
    def model_weight(self) -> float:
        if self.fusion == "replace":
            return 1.0
        return 0.0 if self.weight is None else 1.0 - self.weight

    def label(self) -> str:
        if self.window is None:
            return self.fusion
        parts = [self.fusion, f"window {self.window}"]
        if self.weight is not None:
            parts.append(f"w {self.weight:g}")
        if self.rrf_k is not None:
            parts.append(f"k {self.rrf_k}")
        if self.first_stage is not None:
            parts.append(f"on hybrid-{self.first_stage.label()}" + (" (both lists' top window)" if self.rerank_window == "both" else ""))
        return ", ".join(parts)


# ---------------------------------------------------------------------------------------------- measuring


def _search_body(query: LabelledQuery, text_field: str | tuple[str, ...], size: int) -> dict:
    # several fields: a multi_match over them, as the demo UI searches
    clause: dict = {"match": {text_field: query.text}} if isinstance(text_field, str) else {"multi_match": {"query": query.text, "fields": list(text_field)}}
    bool_query: dict = {"must": [clause]}
    if query.exclude:
        bool_query["must_not"] = [{"ids": {"values": list(query.exclude)}}]
    return {"query": {"bool": bool_query}, "size": size, "_source": False}


def fetch_runs(
    gateway_url: str, settings: TuneSettings, queries: Sequence[LabelledQuery], *, text_field: str | tuple[str, ...]
) -> list[QueryRuns]:
    """Engine order, augmented order and the largest reranked window of every query, through the gateway. ``text_field``
    is the field queried (``match``), or a tuple of fields (``multi_match``). A query whose rerank failed (the gateway
    failed open) gets ``window=None`` and is logged: its fusion rows use the augmented order, as the gateway served it."""
    import httpx

    from jingpai.plugin.tune_hybrid import fetch_candidates

    depth, largest = settings.depth, max(settings.windows)
    url = f"{gateway_url}/{settings.index}/_search"

    def one(client: httpx.Client, query: LabelledQuery) -> QueryRuns:
        body = {**_search_body(query, text_field, depth), "ext": {"jingpai": {"hybrid": False}}}

        def search(payload: dict, **params: str) -> dict:
            resp = client.post(url, json=payload, params=params)
            if resp.status_code != 200:
                raise TuneError(f"search for query {query.qid} answered HTTP {resp.status_code}: {resp.text[:300]}")
            return resp.json()

        engine = [h["_id"] for h in search(body, jingpai="off")["hits"]["hits"]]
        augmented = [h["_id"] for h in search(body, jingpai="augment")["hits"]["hits"]]
        reranked = search(
            {**body, "size": largest, "ext": {"jingpai": {"window": largest, "fusion": "replace", "hybrid": False}}}, jingpai="rerank"
        )
        window = None
        if reranked["jingpai"]["reranked"]:
            hits = sorted(reranked["hits"]["hits"], key=lambda h: h["_jingpai"]["engine_rank"])
            window = [(h["_id"], h["_jingpai"]["engine_score"], h["_jingpai"]["model_score"]) for h in hits]
        else:
            logger.warning("query %s was not reranked (%s): its fusion rows use the augmented order", query.qid, reranked["jingpai"]["reason"])
        hybrid = fetch_candidates(search, body, depth, qid=query.qid) if settings.hybrid else None
        return QueryRuns(query, engine, augmented, window, hybrid)

    # the gateway holds no credentials: the tuning's own go with every search, as a client's would
    headers = settings.auth.headers() if settings.auth is not None else {}
    with httpx.Client(timeout=300, trust_env=False, headers=headers) as client, ThreadPoolExecutor(settings.concurrency) as pool:
        return list(pool.map(lambda q: one(client, q), queries))


def fused_ranking(runs: QueryRuns, spec: FusionSpec, window: int, depth: int) -> list[str]:
    """The ranking the gateway serves for ``spec`` at ``window``: the fused window, then the augmented tail."""
    if runs.window is None:
        return runs.augmented[:depth]
    hits = runs.window[:window]
    fused = spec.fuse([h[1] for h in hits], [h[2] for h in hits], engine_ranks=range(1, len(hits) + 1))
    head = [hits[i][0] for i in fused_order(fused)]
    shown = set(head)
    return head + [doc for doc in runs.augmented[len(hits) :] if doc not in shown][: depth - len(head)]


def grid(settings: TuneSettings) -> list[tuple[str, FusionSpec]]:
    """Every fusion measured per window, in table order."""
    specs = [("replace", FusionSpec(mode="replace"))]
    specs += [("linear", FusionSpec(mode="linear", weight=w)) for w in settings.weights]
    specs += [("rrf", FusionSpec(mode="rrf", weight=w, rrf_k=k)) for k in settings.rrf_ks for w in settings.weights]
    return specs


def measure(settings: TuneSettings, runs: Sequence[QueryRuns]) -> list[TuneRow]:
    """The table: the engine and augmented baselines, every fusion × window, then (``hybrid``) the hybrid first-stage
    rows and the hybrid + rerank rows."""
    from jingpai.plugin.tune_hybrid import hybrid_rows, pipeline_rows
    from jingpai.reranker.evaluate import evaluate_rankings

    relevant = {r.query.qid: r.query.relevant for r in runs}

    def metrics(rankings: dict[str, list[str]]) -> dict[str, float]:
        m = evaluate_rankings(rankings, relevant, cutoffs=CUTOFFS)
        return {name: m[name] for name in METRICS}

    depth = settings.depth
    rows = [
        TuneRow("engine", None, None, None, metrics({r.query.qid: r.engine[:depth] for r in runs})),
        TuneRow("augmented", None, None, None, metrics({r.query.qid: r.augmented[:depth] for r in runs})),
    ]
    for window in settings.windows:
        for mode, spec in grid(settings):
            rankings = {r.query.qid: fused_ranking(r, spec, window, depth) for r in runs}
            weight = None if mode == "replace" else spec.weight
            rows.append(TuneRow(mode, window, weight, spec.rrf_k if mode == "rrf" else None, metrics(rankings)))
    if settings.hybrid:
        rows += hybrid_rows(settings, runs, metrics, row=TuneRow)
        rows += pipeline_rows(settings, runs, metrics, row=TuneRow, bm25_ranking=fused_ranking)
    return rows


def never_worse(row: TuneRow, baseline: TuneRow) -> bool:
    """Whether ``row`` is at least ``baseline`` at every P@k of :data:`CUTOFFS` (the gateway's promise: a
    reranked page never loses to the order it reranks)."""
    return all(round(row.metrics[f"P@{k}"], 12) >= round(baseline.metrics[f"P@{k}"], 12) for k in CUTOFFS)


def _safe(candidates: list[TuneRow], rows: Sequence[TuneRow], never_worse_than: str | None, what: str) -> list[TuneRow]:
    """``candidates`` at least the ``never_worse_than`` baseline row at every P@k (all of them, logged, when none is)."""
    if never_worse_than is None:
        return candidates
    baseline = next((r for r in rows if r.fusion == never_worse_than and r.window is None), None)
    if baseline is None:
        raise TuneError(f"never_worse_than must name a baseline row (engine or augmented), got {never_worse_than!r}")
    safe = [r for r in candidates if never_worse(r, baseline)]
    if not safe:
        logger.warning("no %s setting is at least the %s order at every P@k on these queries: choosing among all of them", what,
                       never_worse_than)
    return safe or candidates


def best_row(rows: Sequence[TuneRow], metric: str, *, never_worse_than: str | None = None) -> TuneRow:
    """The fusion row (a rerank of BM25's window) with the highest ``metric``; ties: the larger model weight, then
    the smaller window. With ``never_worse_than`` (``engine`` or ``augmented``), only rows at least that baseline at
    every P@k compete (:func:`never_worse`); when no fusion row qualifies, every row does, and that is logged."""
    candidates = [r for r in rows if r.window is not None and r.first_stage is None and not r.fusion.startswith("hybrid")]
    candidates = _safe(candidates, rows, never_worse_than, "fusion")
    return max(candidates, key=lambda r: (round(r.metrics[metric], 12), r.model_weight, -(r.window or 0)))


def best_pipeline(rows: Sequence[TuneRow], metric: str, *, never_worse_than: str | None = None) -> TuneRow | None:
    """The hybrid + rerank row (:func:`~jingpai.plugin.tune_hybrid.pipeline_rows`) with the highest ``metric`` (ties:
    the fused window, which reranks fewer hits; larger model weight, smaller window, larger kNN weight; ``None``: no
    such rows); ``never_worse_than``: see :func:`best_row`."""
    candidates = [r for r in rows if r.first_stage is not None]
    if not candidates:
        return None
    candidates = _safe(candidates, rows, never_worse_than, "hybrid + rerank")
    return max(candidates, key=lambda r: (round(r.metrics[metric], 12), r.rerank_window != "both", r.model_weight, -(r.window or 0),
                                          -(r.first_stage.weight if r.first_stage else 0.0)))


def run_tune(settings: TuneSettings, queries: Sequence[LabelledQuery], *, text_field: str | tuple[str, ...]) -> list[TuneRow]:
    """Start the gateway in-process, fetch every query's runs and measure the grid."""
    from jingpai.plugin.gateway import create_app
    from jingpai.plugin.settings import GatewaySettings
    from jingpai.serving import serve

    queries = list(queries)[: settings.limit] if settings.limit else list(queries)
    base = {k: v for k, v in settings.base.items() if k not in ("engine_url", "reranker_url", "dict_dirs", "host", "port")}
    largest = max(settings.windows)
    gateway_settings = GatewaySettings(**{
        **base, "engine_url": settings.engine_url, "reranker_url": settings.reranker_url, "dict_dirs": settings.dict_dirs,
        "embed_url": settings.embed_url or base.get("embed_url"), "embed_timeout_ms": max(int(base.get("embed_timeout_ms", 0)), 300_000),
        # --hybrid reranks every hybrid candidate once: a window of twice the depth
        "window": largest, "max_window": max(2 * settings.depth, largest, int(base.get("max_window", 500))),
        # tuning measures the model: a slow rerank must finish, not fail open
        "timeout_ms": max(int(base.get("timeout_ms", 0)), 300_000), "meta_ttl_s": 3600.0,
        "engine_ca_file": settings.auth.ca_file if settings.auth is not None and settings.auth.ca_file else base.get("engine_ca_file"),
    })
    with serve(create_app(gateway_settings), name="gateway") as server:
        runs = fetch_runs(server.url, settings, queries, text_field=text_field)
    return measure(settings, runs)


__all__ = ["METRICS", "LabelledQuery", "QueryRuns", "TuneError", "TuneRow", "TuneSettings", "best_pipeline", "best_row", "fetch_runs",
           "fused_ranking", "grid", "measure", "never_worse", "queries_from_pairs", "queries_from_trec", "run_tune"]
