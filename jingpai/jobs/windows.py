"""Window-shaped training data: the candidates the gateway will ask a reranker to order, mined for
*training* queries through a real engine (reranker + indexer + engine + plugin, hence a job).

A model trained on labelled pairs learns "is this pair a match?"; the gateway asks "which of these 20
lexically close questions is the paraphrase?". So the training texts are indexed with ``jingpai index``
(dictionary segmentation + keywords), each training query is searched with the gateway's own augmented
query (:class:`~jingpai.plugin.augment.QueryRewriter`), and its window becomes a training group:

- label 1: the query's known paraphrases (every text paired with it with label ≥ ``relevant_min``), in
  the window or not — a window without its paraphrase still teaches what ranks below it;
- label 0: the query's labelled non-matches, and the window's other hits, except the *unlabelled
  paraphrases* that would poison the negatives: texts in the query's paraphrase component (paraphrases of
  paraphrases, transitively), and texts equal to the query or to one of its paraphrases once punctuation,
  spaces and case are ignored (:func:`normalise`).

Statistics (how often the paraphrase is in the window at all, what was filtered) come back with the
pairs, so a user sees the recall bound of the data set before training on it.

Example:
    >>> result = mine_windows(pairs, engine=connect(url), dictionary=d, settings=WindowSettings())  # doctest: +SKIP
    >>> write_pairs(result.pairs, "lcqmc_windows.tsv")                                            # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import random
import re
import tempfile
import unicodedata
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from jingpai.reranker.data import LabeledPair
from jingpai.reranker.negatives import NegativeSamplingError

if TYPE_CHECKING:
    from jingpai.engine.client import Engine
    from jingpai.keyword_dict import Dictionary

logger = logging.getLogger(__name__)

_IGNORED = re.compile(r"[\W_]+", re.UNICODE)


@dataclass(frozen=True)
class WindowSettings:
    """Options of :func:`mine_windows`.

    Attributes:
        index: alias the training texts are indexed under (rebuilt when its dictionary version is new).
        window: hits retrieved per query: the gateway's rerank window.
        per_query: at most this many window negatives per query, best-ranked first.
        max_queries: mine at most this many queries (sampled with ``seed``; ``None``: every query with a
            known paraphrase).
        relevant_min: labels ``>=`` this are paraphrases.
        threads: searches in flight at once.
        seed: sampling seed.
    """

    index: str = "jingpai-windows"
    window: int = 20
    per_query: int = 7
    max_queries: int | None = None
    relevant_min: float = 1.0
    threads: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("window", "per_query", "threads"):
            if getattr(self, name) < 1:
                raise NegativeSamplingError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_queries is not None and self.max_queries < 1:
            raise NegativeSamplingError(f"max_queries must be >= 1 or None, got {self.max_queries}")


@dataclass
class WindowResult:
    """Training pairs grouped by query (each query's pairs are consecutive) and what mining saw."""

    pairs: list[LabeledPair] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    def count(self, name: str, n: int = 1) -> None:
        self.stats[name] = self.stats.get(name, 0) + n


def normalise(text: str) -> str:
    """``text`` without punctuation, spaces, case or width differences: near-duplicates compare equal.

    >>> normalise("怎么开通 微粒贷？") == normalise("怎么开通微粒贷")
    True
    """
    return _IGNORED.sub("", unicodedata.normalize("NFKC", text).lower())


def paraphrase_components(pairs: Sequence[LabeledPair], *, relevant_min: float = 1.0) -> dict[str, int]:
    """Text → id of its paraphrase component (texts linked by positive pairs, transitively; union-find).

    >>> c = paraphrase_components([LabeledPair("a", "b", 1), LabeledPair("b", "c", 1), LabeledPair("a", "d", 0)])
    >>> c["a"] == c["c"], c["a"] == c.get("d")
    (True, False)
    """
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for p in pairs:
        if p.label >= relevant_min and p.query != p.document:
            a, b = find(p.query), find(p.document)
            if a != b:
                parent[a] = b
    roots: dict[str, int] = {}
    return {text: roots.setdefault(find(text), len(roots)) for text in parent}


def _build_index(engine: Engine, texts: Sequence[str], dictionary: Dictionary, settings: WindowSettings) -> None:
    """Index ``texts`` (ids ``t<row>``) with ``jingpai index``'s pipeline under ``settings.index``."""
    from jingpai.indexer.pipeline import IndexSettings, index_corpus

    with tempfile.TemporaryDirectory(prefix="jingpai-windows-") as tmp:
        corpus = Path(tmp) / "texts.jsonl"
        corpus.write_text("".join(json.dumps({"id": f"t{i}", "text": t}, ensure_ascii=False) + "\n" for i, t in enumerate(texts)),
                          encoding="utf-8")
        report = index_corpus(engine, [corpus], IndexSettings(index=settings.index, text_fields=("text",), id_field="id",
                                                              progress=False, quarantine_dir=Path(tmp)), dictionary=dictionary)
    engine.refresh(settings.index)
    logger.info("indexed %d training texts into %s", report.indexed, report.physical_index)


def _searcher(engine: Engine, dictionary: Dictionary, settings: WindowSettings):
    """``search(text, own id) → [hit ids]``: the gateway's augmented match query, top ``window``."""
    from jingpai.indexer.mapping import read_meta
    from jingpai.keyword_dict.segment import Segmenter
    from jingpai.plugin.augment import QueryRewriter

    rewrite = QueryRewriter(read_meta(engine, settings.index), dictionary=dictionary, segmenter=Segmenter(dictionary))

    def search(text: str, own_id: str) -> list[str]:
        query = rewrite({"match": {"text": text}}).query
        body = {"query": {"bool": {"must": [query], "must_not": [{"ids": {"values": [own_id]}}]}}, "size": settings.window, "_source": False}
        return [hit["_id"] for hit in engine.search(settings.index, body)["hits"]["hits"]]

    return search


def mine_windows(
    pairs: Sequence[LabeledPair], *, engine: Engine, dictionary: Dictionary, settings: WindowSettings,
) -> WindowResult:
    """Window-shaped training groups for the queries of ``pairs`` (see the module docs).

    Raises:
        NegativeSamplingError: ``pairs`` has no query with a known paraphrase.
    """
    texts = list(dict.fromkeys(t for p in pairs for t in (p.query, p.document)))
    row = {t: i for i, t in enumerate(texts)}
    component = paraphrase_components(pairs, relevant_min=settings.relevant_min)
    by_query: dict[str, list[LabeledPair]] = {}
    for p in pairs:
        by_query.setdefault(p.query, []).append(p)
    queries = [q for q, ps in by_query.items() if any(p.label >= settings.relevant_min for p in ps)]
    if not queries:
        raise NegativeSamplingError(f"no query has a pair labelled >= {settings.relevant_min}: nothing to mine windows for")
    if settings.max_queries is not None and len(queries) > settings.max_queries:
        queries = random.Random(settings.seed).sample(queries, settings.max_queries)
    _build_index(engine, texts, dictionary, settings)
    search = _searcher(engine, dictionary, settings)
    with ThreadPoolExecutor(settings.threads) as pool:
        windows = list(pool.map(lambda q: search(q, f"t{row[q]}"), queries))
    result = WindowResult(stats={"queries": len(queries), "texts indexed": len(texts)})
    for q, hits in zip(queries, windows, strict=True):
        _group(q, [texts[int(h[1:])] for h in hits], by_query[q], component, settings, result)
    return result


def _group(q: str, window: list[str], labelled: list[LabeledPair], component: dict[str, int], settings: WindowSettings,
           result: WindowResult) -> None:
    """Append q's training group to ``result``: its labelled pairs, then its clean window negatives."""
    positives = {p.document for p in labelled if p.label >= settings.relevant_min}
    if positives & set(window):
        result.count("paraphrase in window")
    own = component.get(q)
    near = {normalise(t) for t in (q, *positives)}
    seen = {p.document for p in labelled}
    result.pairs.extend(LabeledPair(q, p.document, 1.0 if p.label >= settings.relevant_min else 0.0) for p in labelled)
    kept = 0
    for hit in window:
        if kept >= settings.per_query:
            break
        if hit in seen:
            continue
        if own is not None and component.get(hit) == own:
            result.count("skipped: paraphrase of a paraphrase")
        elif normalise(hit) in near:
            result.count("skipped: same text up to punctuation")
        else:
            result.pairs.append(LabeledPair(q, hit, 0.0))
            seen.add(hit)
            kept += 1
    result.count("window negatives", kept)


__all__ = ["WindowResult", "WindowSettings", "mine_windows", "normalise", "paraphrase_components"]
