"""Metrics and the engine-free protocol of the judged Chinese sets (report section ``judged``, :mod:`bench.eval_judged`).

**Judged-only metrics.** A14, QBQTC and KUAKE-QTR judge a pool per query, not the corpus: a hit nobody judged is
neither right nor wrong. :func:`judged_metrics` drops every unjudged document from a ranking first (the condensed
list; for A14 the data README's "nDCG@10 / MAP over judged passages") and then scores it with ir-measures (trec_eval
semantics, linear gains = the grades), over the queries with at least one document of grade > 0; ``MRR (top grade)``
is the reciprocal rank of the first document of the set's top grade, over the queries that have one.
:func:`judged_share` says how much of an engine's top 10 the judgments can see at all.

**Reordering the judged list** (:func:`reorder_rankings`): no engine; each dev query's judged candidates (all of
them, grade 0 too) are ordered by BM25 over jieba tokens (bm25s, Lucene's formula at the engines' ``k1 = 1.2``,
``b = 0.75``, with the statistics of the whole corpus, as an index of it would have), by a model's scores, by both
fused as the gateway fuses (``linear``, engine weight 0.5, min-max per query), or at random (seeded): the floor.

Example:
    >>> qrels = {"q": {"a": 1, "b": 0, "c": 1}}
    >>> m = judged_metrics({"q": ["x", "a", "y", "b", "c"]}, qrels, ("nDCG@10", "MAP"))
    >>> round(m["MAP"], 4), m["queries"]                 # the condensed list is a, b, c
    (0.8333, 1)
    >>> judged_share({"q": ["x", "a", "y", "b"]}, qrels)
    0.5
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jingpai.reranker.base import Reranker
    from jingpai.reranker.judged import JudgedSet

logger = logging.getLogger(__name__)

TOP_GRADE_MRR = "MRR (top grade)"
JUDGED_SHARE = "judged@10"
#: the metric column names this module computes → their ir-measures spelling (``{top}``: the set's top grade)
MEASURES = {"nDCG@3": "nDCG@3", "nDCG@5": "nDCG@5", "nDCG@10": "nDCG@10", "MAP": "AP", "MRR": "RR", TOP_GRADE_MRR: "RR(rel={top})"}
K1, B = 1.2, 0.75
#: the engine's weight when a model's score is fused with BM25 (the gateway's default ``linear`` fusion)
FUSION_WEIGHT = 0.5


def condensed(rankings: dict[str, Sequence[str]], qrels: dict[str, dict[str, int]]) -> dict[str, list[str]]:
    """Each judged query's ranking with every unjudged document dropped (order kept).

    >>> condensed({"q": ["x", "b", "a"], "other": ["a"]}, {"q": {"a": 1, "b": 0}})
    {'q': ['b', 'a']}
    """
    return {q: [d for d in ranked if d in qrels[q]] for q, ranked in rankings.items() if q in qrels}


def judged_metrics(rankings: dict[str, Sequence[str]], qrels: dict[str, dict[str, int]], metrics: Sequence[str],
                   *, top_grade: int | None = None) -> dict[str, Any]:
    """``metrics`` (names of :data:`MEASURES`) of ``rankings`` over judged documents only, plus ``queries``.

    Args:
        rankings: query id → document ids, best first (unjudged ones may be among them; they are dropped).
        qrels: query id → {document id: grade}, every judged candidate (grade 0 too).
        metrics: column names; ``MRR (top grade)`` needs ``top_grade`` (default: the highest grade in ``qrels``).

    Raises:
        ValueError: an unknown metric name, or no ranked query has a document of grade > 0.
    """
    import ir_measures
    from ir_measures import Qrel, ScoredDoc

    unknown = [m for m in metrics if m not in MEASURES]
    if unknown:
        raise ValueError(f"unknown judged metric(s) {unknown}; expected some of {', '.join(MEASURES)}")
    top = top_grade or max((g for judged in qrels.values() for g in judged.values()), default=1)
    runs = condensed(rankings, qrels)
    out: dict[str, Any] = {"queries": sum(1 for q in runs if any(g > 0 for g in qrels[q].values()))}
    for name in metrics:
        need = top if name == TOP_GRADE_MRR else 1
        queries = [q for q in runs if any(g >= need for g in qrels[q].values())]
        if not queries:
            raise ValueError(f"{name}: none of the {len(rankings)} ranked queries has a judged document of grade >= {need}")
        measure = ir_measures.parse_measure(MEASURES[name].format(top=top))
        run = [ScoredDoc(q, d, float(-rank)) for q in queries for rank, d in enumerate(runs[q])]
        run += [ScoredDoc(q, "\x00nothing-retrieved", 0.0) for q in queries if not runs[q]]  # counts, as all zeros
        qrel = [Qrel(q, d, int(g)) for q in queries for d, g in qrels[q].items()]
        out[name] = float(ir_measures.calc_aggregate([measure], qrel, run).get(measure, 0.0))
    return out


def judged_share(rankings: dict[str, Sequence[str]], qrels: dict[str, dict[str, int]], *, k: int = 10) -> float:
    """Mean over the judged queries with a hit of the share of their top ``k`` hits that is judged for them.

    >>> judged_share({"q1": ["a", "x"], "q2": [], "q3": ["b"]}, {"q1": {"a": 0}, "q2": {"a": 1}, "q3": {"a": 1}})
    0.25
    """
    shares = [sum(d in qrels[q] for d in ranked[:k]) / len(ranked[:k]) for q, ranked in rankings.items() if q in qrels and ranked]
    return sum(shares) / len(shares) if shares else float("nan")


def jieba_tokens(text: str) -> list[str]:
    """jieba's tokens of ``text`` (precise mode), lower-cased, whitespace and punctuation-only tokens dropped."""
    import jieba

    return [t.lower() for t in jieba.lcut(text) if any(c.isalnum() for c in t)]


def bm25_candidates(jset: JudgedSet) -> dict[str, dict[str, float]]:
    """BM25 (bm25s, jieba tokens, the whole corpus' statistics) of each query's search text against each of its
    judged candidates: ``{query id: {doc id: score}}``."""
    import bm25s
    import jieba

    logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s logs at DEBUG by default
    jieba.setLogLevel(logging.WARNING)
    ids = list(jset.docs)
    position = {d: i for i, d in enumerate(ids)}
    index = bm25s.BM25(k1=K1, b=B, method="lucene")
    index.index([jieba_tokens(jset.docs[d]) for d in ids], show_progress=False)
    out: dict[str, dict[str, float]] = {}
    for q, judged in jset.qrels.items():
        scores = index.get_scores(jieba_tokens(jset.queries[q]))
        out[q] = {d: float(scores[position[d]]) for d in judged}
    return out


def model_candidates(model: Reranker, jset: JudgedSet, *, batch_size: int = 64) -> dict[str, dict[str, float]]:
    """A model's score of each judged candidate against the query's model text (A14: ``short name（full name）``)."""
    keys = [(q, d) for q, judged in jset.qrels.items() for d in judged]
    scores = model.predict([(jset.model_text[q], jset.docs[d]) for q, d in keys], batch_size=batch_size)
    out: dict[str, dict[str, float]] = {}
    for (q, d), s in zip(keys, scores, strict=True):
        out.setdefault(q, {})[d] = float(s)
    return out


def by_score(scores: dict[str, dict[str, float]]) -> dict[str, list[str]]:
    """Each query's documents by descending score; ties by document id (no hidden order leaks in)."""
    return {q: sorted(docs, key=lambda d: (-docs[d], d)) for q, docs in scores.items()}


def fused(engine: dict[str, dict[str, float]], model: dict[str, dict[str, float]], *, weight: float = FUSION_WEIGHT) -> dict[str, dict[str, float]]:
    """Per query, the gateway's ``linear`` fusion (min-max of each signal over the query's candidates, engine weight
    ``weight``) of two score maps over the same candidates (:class:`jingpai.reranker.fusion.FusionSpec`)."""
    import numpy as np

    from jingpai.reranker.fusion import FusionSpec

    spec = FusionSpec(mode="linear", weight=weight)
    out = {}
    for q, docs in engine.items():
        ids = list(docs)
        values = spec.fuse(np.array([docs[d] for d in ids]), np.array([model[q][d] for d in ids]))
        out[q] = {d: float(v) for d, v in zip(ids, values, strict=True)}
    return out


def fused_window(window: Sequence[tuple[str, float | None, float]], weight: float) -> list[str]:
    """The order the gateway serves for a reranked window (``(id, engine score, model score)`` in engine order) under
    ``linear`` fusion at engine weight ``weight`` (ties by engine rank), as ``jingpai tune`` rebuilds it.

    >>> fused_window([("a", 3.0, 0.1), ("b", 2.0, 0.9), ("c", 1.0, 0.5)], 1.0), fused_window([("a", 3.0, 0.1), ("b", 2.0, 0.9)], 0.0)
    (['a', 'b', 'c'], ['b', 'a'])
    """
    from jingpai.reranker.fusion import FusionSpec, fused_order

    fused = FusionSpec(mode="linear", weight=weight).fuse([h[1] for h in window], [h[2] for h in window], engine_ranks=range(1, len(window) + 1))
    return [window[i][0] for i in fused_order(fused, range(1, len(window) + 1))]


def weight_curve(windows: dict[str, Sequence[tuple[str, float | None, float]]], qrels: dict[str, dict[str, int]], metric: str,
                 *, top_grade: int | None = None) -> dict[float, float]:
    """``metric`` over judged documents of the fused windows at each engine weight of the report's grid (``TUNE_WEIGHTS``)."""
    from bench.eval_common import TUNE_WEIGHTS

    return {w: judged_metrics({q: fused_window(h, w) for q, h in windows.items()}, qrels, (metric,), top_grade=top_grade)[metric]
            for w in TUNE_WEIGHTS}


def random_rankings(qrels: dict[str, dict[str, int]], seed: int) -> dict[str, list[str]]:
    """Each query's judged candidates in a random order (``random.Random(seed)``, queries in qrels order)."""
    rng = random.Random(seed)
    out = {}
    for q, judged in qrels.items():
        ids = sorted(judged)
        rng.shuffle(ids)
        out[q] = ids
    return out


def summary_records(tables: Sequence[Any]) -> list[dict[str, Any]]:
    """``docs/results/summary.json``'s records: one per data set, split, engine and system (a row of a table of
    section ``judged``), with its metrics and the command that reruns it."""
    records = []
    for table in tables:
        if table.section != "judged" or "dataset" not in table.meta:
            continue
        metric_columns = [c for c in table.columns if c not in ("method", "queries")]
        for row in table.rows:
            metrics = {c: row.cells[c] for c in metric_columns if c in row.cells}
            records.append({"dataset": table.meta["dataset"], "split": table.meta.get("split", "dev"),
                            "engine": table.meta.get("engine_kind", "none"), "protocol": table.meta.get("protocol", ""),
                            "system": row.cells["method"], "queries": row.cells.get("queries"), "metrics": metrics,
                            "command": row.command, "mode": table.meta.get("mode", ""), "date": table.meta.get("date", "")})
    return records
