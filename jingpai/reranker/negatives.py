"""Negative sampling for matching models, the engine-free part (keyword-attentive-bert.txt §3.3; MODEL_NOTES §1):
the settings and result types, keyword overlap, entity replacement and the ``random`` strategy.

The ``keyword`` strategy retrieves candidates from a real engine and lives in
:mod:`jingpai.jobs.negatives` (which spans the engine and the reranker); its rule:

1. retrieve candidates from a real engine with the keyword-augmented query ``q + " " + keywords(q)``;
2. ``Sim(q, q)`` is the engine score of q itself (the hit whose text equals q; when q is not indexed,
   the top score stands in for it, which is logged);
3. keep candidate Q as a negative when ``Sim(q, Q) / Sim(q, q) < alpha`` AND the keyword overlap
   ``|K(q) ∩ K(Q)| / |K(q) ∪ K(Q)| > beta`` (α 0.6, β 0.2 by default) — similar-looking but not the same;
4. plus entity replacement (:func:`replace_entity`): for a share ``replace_ratio`` of the queries, swap one
   keyword of q for another word of the same dictionary domain (中国 → 美国) to make a near-duplicate negative.

``window`` strategy (:mod:`jingpai.jobs.windows`) — the window the gateway will rerank: the training texts
indexed with ``jingpai index``, each query searched with the gateway's own augmented query, the top
``candidates`` hits that are not known paraphrases (transitively) or near-duplicates become negatives
(``per_query`` of them), next to the query's labelled pairs — training groups for in-window losses.

``random`` strategy (:func:`random_negatives`) — ``per_query`` texts drawn uniformly from the candidate
pool, the usual baseline. :func:`entity_negatives` makes replacement negatives for training without an engine.

Known positives (and q itself) are never emitted as negatives.

Example:
    >>> keyword_overlap(["花呗", "还款"], ["花呗", "分期"])
    0.3333333333333333
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

from jingpai.errors import UserError
from jingpai.reranker.data import LabeledPair

if TYPE_CHECKING:
    from jingpai.keyword_dict import Dictionary

logger = logging.getLogger(__name__)

Strategy = Literal["keyword", "random", "window"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)


class NegativeSamplingError(UserError, ValueError):
    """Bad sampling settings or inputs (the message names the value and what was expected)."""


@dataclass(frozen=True)
class NegativeSettings:
    """Options of :func:`sample_negatives`.

    Attributes:
        strategy: ``keyword`` (engine retrieval + α/β rule + entity replacement), ``window`` (the gateway's
            window over the training texts, :mod:`jingpai.jobs.windows`) or ``random``.
        alpha: keep Q only when ``Sim(q,Q)/Sim(q,q) < alpha``.
        beta: keep Q only when the keyword overlap (Jaccard) ``> beta``.
        candidates: hits retrieved per query.
        per_query: at most this many retrieved (or random) negatives per query.
        replace_ratio: share of queries that also get an entity-replacement negative (``keyword`` only).
        top_k_keywords: keywords per text for augmentation and overlap.
        field: the index field holding the candidate text.
        seed: random seed (replacement choices, random negatives, sampled queries).
        max_queries: ``window`` only: mine at most this many queries, sampled (``None``: all with a paraphrase).
    """

    strategy: Strategy = "keyword"
    alpha: float = 0.6
    beta: float = 0.2
    candidates: int = 20
    per_query: int = 2
    replace_ratio: float = 0.5
    top_k_keywords: int = 10
    field: str = "text"
    seed: int = 0
    max_queries: int | None = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise NegativeSamplingError(f"unknown negative strategy {self.strategy!r}; expected one of {', '.join(STRATEGIES)}")
        if not 0.0 <= self.replace_ratio <= 1.0:
            raise NegativeSamplingError(f"replace_ratio must be in [0, 1], got {self.replace_ratio}")
        for name in ("candidates", "per_query", "top_k_keywords"):
            if getattr(self, name) < 1:
                raise NegativeSamplingError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class NegativeRecord:
    """Why one negative was emitted: its source, the rule's two numbers (retrieved) or the swap (replaced)."""

    query: str
    document: str
    source: Literal["retrieved", "replaced", "random"]
    sim_ratio: float | None = None
    overlap: float | None = None
    swapped: tuple[str, str] | None = None


@dataclass
class NegativeResult:
    """Negatives as label-0 pairs, with per-pair records and counts."""

    pairs: list[LabeledPair] = field(default_factory=list)
    records: list[NegativeRecord] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    def add(self, record: NegativeRecord) -> None:
        self.records.append(record)
        self.pairs.append(LabeledPair(record.query, record.document, 0.0))
        self.stats[record.source] = self.stats.get(record.source, 0) + 1


def keyword_overlap(a: Iterable[str], b: Iterable[str]) -> float:
    """Jaccard overlap ``|A ∩ B| / |A ∪ B|`` of two keyword sets (0.0 when both are empty)."""
    sa, sb = set(a), set(b)
    union = sa | sb
    return len(sa & sb) / len(union) if union else 0.0


def augmented_query(text: str, keywords: Sequence[str]) -> str:
    """The search text ``{x1 … xn, k1 … km}``: the query followed by its keywords."""
    return " ".join([text, *keywords]) if keywords else text


def replace_entity(
    text: str, keywords: Sequence[str], dictionary: Dictionary, rng: random.Random
) -> tuple[str, str, str] | None:
    """Swap one keyword of ``text`` for another word of its best dictionary domain.

    Returns:
        ``(new text, old word, new word)``, or ``None`` when no keyword has a same-domain alternative
        that is not already in ``text``.
    """
    options = []
    for word in keywords:
        domains = dictionary.domains(word)
        if not domains or word not in text:
            continue
        domain = max(domains, key=domains.get)
        alternatives = [w for w in dictionary.domain_words(domain) if w != word and w not in text]
        if alternatives:
            options.append((word, alternatives))
    if not options:
        return None
    word, alternatives = rng.choice(options)
    new = rng.choice(alternatives)
    return text.replace(word, new, 1), word, new


def entity_negatives(
    pairs: Sequence[LabeledPair], dictionary: Dictionary, *, ratio: float = 0.5, seed: int = 0, top_k_keywords: int = 10,
) -> list[LabeledPair]:
    """Entity-replacement negatives for training (the paper's replacement step, without an engine).

    For a share ``ratio`` of the positive pairs ``(q, d)``, one keyword of ``d`` is swapped for another
    word of its dictionary domain (中国 → 美国) and ``(q, d')`` becomes a label-0 pair: it looks like the
    match but names something else, the case keyword attention exists for.
    """
    if not 0.0 <= ratio <= 1.0:
        raise NegativeSamplingError(f"entity-negative ratio must be in [0, 1], got {ratio}")
    from jingpai.keyword_dict import KeywordExtractor  # here: keyword_dict loads numpy and jieba

    keywords = KeywordExtractor(dictionary, top_k=top_k_keywords)
    rng = random.Random(seed)
    out: list[LabeledPair] = []
    positives = [p for p in pairs if p.label > 0]
    for pair in positives:
        if rng.random() >= ratio:
            continue
        swapped = replace_entity(pair.document, keywords.words(pair.document), dictionary, rng)
        if swapped is not None and swapped[0] != pair.query:
            out.append(LabeledPair(pair.query, swapped[0], 0.0))
    logger.info("made %d entity-replacement negatives from %d positive pairs", len(out), len(positives))
    return out


def random_negatives(
    queries: Sequence[str],
    pool: Sequence[str],
    *,
    settings: NegativeSettings,
    positives: Mapping[str, set[str]] | None = None,
) -> NegativeResult:
    """The ``random`` strategy: ``settings.per_query`` texts of ``pool`` drawn uniformly for each query.

    Known positives and the query itself are never drawn; duplicate queries are processed once.

    Raises:
        NegativeSamplingError: ``pool`` is empty.

    >>> r = random_negatives(["a", "b"], ["a", "b", "c"], settings=NegativeSettings(strategy="random", per_query=1))
    >>> r.stats["queries"], len(r.pairs), all(p.query != p.document for p in r.pairs)
    (2, 2, True)
    """
    if not pool:
        raise NegativeSamplingError("the random strategy needs a candidate pool of texts (pool=…)")
    known = positives or {}
    rng = random.Random(settings.seed)
    result = NegativeResult(stats={"queries": 0})
    candidates = list(dict.fromkeys(pool))
    for q in dict.fromkeys(queries):
        result.stats["queries"] += 1
        banned = known.get(q, set()) | {q}
        allowed = [c for c in candidates if c not in banned]
        for doc in rng.sample(allowed, min(settings.per_query, len(allowed))):
            result.add(NegativeRecord(q, doc, "random"))
    return result


__all__ = [
    "STRATEGIES",
    "NegativeRecord",
    "NegativeResult",
    "NegativeSamplingError",
    "NegativeSettings",
    "Strategy",
    "augmented_query",
    "entity_negatives",
    "keyword_overlap",
    "random_negatives",
    "replace_entity",
]
