"""Negative sampling through a real engine (reranker + engine): the ``keyword`` strategy of
:mod:`jingpai.reranker.negatives`, and indexing a plain list of texts to sample from.

For each query q the engine is asked with the keyword-augmented query; a hit Q is kept as a negative
when ``Sim(q, Q) / Sim(q, q) < alpha`` and the keyword overlap of q and Q is ``> beta``; a share of the
queries also gets an entity-replacement negative (see :mod:`jingpai.reranker.negatives` for the rule).

Example:
    >>> engine = connect("http://127.0.0.1:9200")                                     # doctest: +SKIP
    >>> result = sample_negatives(queries, engine=engine, index="questions", dictionary=d,
    ...                           settings=NegativeSettings(field="text"))            # doctest: +SKIP
    >>> write_pairs(positives + result.pairs, "train_with_negatives.tsv")             # doctest: +SKIP
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from jingpai.reranker.negatives import (
    NegativeRecord,
    NegativeResult,
    NegativeSamplingError,
    NegativeSettings,
    augmented_query,
    keyword_overlap,
    random_negatives,
    replace_entity,
)

if TYPE_CHECKING:
    from jingpai.engine.client import Engine
    from jingpai.keyword_dict import Dictionary

logger = logging.getLogger(__name__)


def _hit_text(hit: dict, field_name: str) -> str | None:
    value = (hit.get("_source") or {}).get(field_name)
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, str) else None


def retrieve(engine: Engine, index: str, text: str, *, field_name: str, size: int) -> list[tuple[str, float]]:
    """``[(candidate text, engine score)]`` for a match query on ``field_name``, best first."""
    body = {"query": {"match": {field_name: text}}, "size": size, "_source": [field_name]}
    hits = engine.search(index, body)["hits"]["hits"]
    out = []
    for hit in hits:
        candidate = _hit_text(hit, field_name)
        if candidate is None:
            raise NegativeSamplingError(f"index {index!r} hit {hit.get('_id')!r} has no text field {field_name!r}; pass the field holding the text")
        out.append((candidate, float(hit["_score"])))
    return out


def sample_negatives(
    queries: Sequence[str],
    *,
    engine: Engine | None = None,
    index: str | None = None,
    dictionary: Dictionary | None = None,
    settings: NegativeSettings,
    positives: Mapping[str, set[str]] | None = None,
    pool: Sequence[str] | None = None,
) -> NegativeResult:
    """Label-0 pairs for ``queries`` by the chosen strategy.

    Args:
        queries: the queries to find negatives for (duplicates are processed once).
        engine: engine holding the candidate index (``keyword`` strategy).
        index: index or alias name to retrieve from (``keyword`` strategy).
        dictionary: keyword dictionary (``keyword`` strategy: keywords, overlap and replacement).
        settings: :class:`NegativeSettings`.
        positives: ``{query: {known positive texts}}`` never to be emitted as negatives.
        pool: candidate texts for the ``random`` strategy.

    Returns:
        :class:`NegativeResult` (pairs, records, stats).

    Raises:
        NegativeSamplingError: a required input for the strategy is missing.
    """
    if settings.strategy == "random":
        return random_negatives(queries, pool or (), settings=settings, positives=positives)
    missing = [name for name, value in (("engine", engine), ("index", index), ("dictionary", dictionary)) if value is None]
    if missing:
        raise NegativeSamplingError(f"the keyword strategy needs {', '.join(missing)}")
    known = positives or {}
    rng = random.Random(settings.seed)
    result = NegativeResult(stats={"queries": 0})
    unique = list(dict.fromkeys(queries))
    sampler = _KeywordSampler(engine, index, dictionary, settings)
    fallbacks = 0
    for q in unique:
        result.stats["queries"] += 1
        fallbacks += sampler.sample(q, known.get(q, set()) | {q}, rng, result)
    if fallbacks:
        logger.info("%d of %d queries were not in index %r: the top engine score stood in for Sim(q, q)", fallbacks, len(unique), index)
    result.stats["self_score_fallbacks"] = fallbacks
    return result


class _KeywordSampler:
    """The ``keyword`` strategy for one query at a time (engine, index, dictionary and settings fixed)."""

    def __init__(self, engine: Engine, index: str, dictionary: Dictionary, settings: NegativeSettings) -> None:
        from jingpai.keyword_dict import KeywordExtractor  # here: keyword_dict loads numpy and jieba

        self.engine, self.index, self.dictionary, self.settings = engine, index, dictionary, settings
        self.keywords = KeywordExtractor(dictionary, top_k=settings.top_k_keywords).words

    def sample(self, q: str, banned: set[str], rng: random.Random, result: NegativeResult) -> int:
        """Add q's retrieved and replaced negatives to ``result``; 1 when q's own score was not found, else 0."""
        settings = self.settings
        kq = self.keywords(q)
        hits = retrieve(self.engine, self.index, augmented_query(q, kq), field_name=settings.field, size=settings.candidates + 1)
        if not hits:
            logger.debug("no candidates retrieved for %r", q)
            return 0
        self_scores = [s for text, s in hits if text == q]
        self_score = max(self_scores) if self_scores else hits[0][1]
        kept = 0
        for text, score in hits:
            if text in banned or kept >= settings.per_query:
                continue
            ratio = score / self_score if self_score > 0 else 1.0
            overlap = keyword_overlap(kq, self.keywords(text))
            if ratio < settings.alpha and overlap > settings.beta:
                result.add(NegativeRecord(q, text, "retrieved", sim_ratio=ratio, overlap=overlap))
                kept += 1
        if settings.replace_ratio > 0 and rng.random() < settings.replace_ratio:
            swapped = replace_entity(q, kq, self.dictionary, rng)
            if swapped is not None and swapped[0] not in banned:
                result.add(NegativeRecord(q, swapped[0], "replaced", swapped=(swapped[1], swapped[2])))
        return 0 if self_scores else 1


def index_texts(engine: Engine, index: str, texts: Iterable[str], *, field_name: str = "text") -> int:
    """Create ``index`` holding one document per distinct text (field ``field_name``), refreshed.

    A convenience for sampling from a plain list of questions; corpora indexed with ``jingpai index``
    can be used directly (pass their text field).

    Returns:
        The number of documents indexed.

    Raises:
        NegativeSamplingError: some documents were rejected by the engine.
    """
    unique = list(dict.fromkeys(t for t in texts if t))
    engine.create_index(index, mappings={"properties": {field_name: {"type": "text"}}})
    failed = [item for ok, item in engine.bulk(
        ({"_op_type": "index", "_index": index, "_id": str(i), "_source": {field_name: t}} for i, t in enumerate(unique))
    ) if not ok]
    if failed:
        raise NegativeSamplingError(f"{len(failed)} of {len(unique)} texts were rejected by {index!r}, e.g. {failed[0]}")
    engine.refresh(index)
    return len(unique)


__all__ = ["index_texts", "retrieve", "sample_negatives"]
