"""Build a fused domain dictionary: discover words per domain, score them with diff-idf, threshold, fuse."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from jingpai.keyword_dict.diffidf import document_frequencies, score_domain
from jingpai.keyword_dict.dictionary import Dictionary, Entry
from jingpai.keyword_dict.discovery import DiscoverySettings, discover
from jingpai.keyword_dict.segment import Segmenter
from jingpai.keyword_dict.text import is_candidate_word

logger = logging.getLogger(__name__)


class BuildError(ValueError):
    """The corpora cannot make a dictionary (too few domains or documents)."""


@dataclass(frozen=True)
class BuildSettings:
    """Every parameter of a dictionary build (recorded in the dictionary's ``meta.json``).

    Args:
        discovery: new-word discovery thresholds.
        known_words: also score the segmenter's own words found in the corpus (min 2 characters).
        known_min_count: minimum occurrences of a known word in the domain.
        smoothing: λ in diff-idf.
        min_score: keep words whose diff-idf is at least this.
        min_df: keep words found in at least this many documents of the domain.
        top_n: keep at most this many words per domain (``None``: all above the threshold).
    """

    discovery: DiscoverySettings = field(default_factory=DiscoverySettings)
    known_words: bool = True
    known_min_count: int = 3
    smoothing: float = 1.0
    min_score: float = 0.5
    min_df: int = 2
    top_n: int | None = 5000

    def to_dict(self) -> dict:
        return asdict(self)


def _known_words(docs: Sequence[str], segmenter: Segmenter, min_count: int) -> Counter[str]:
    counts: Counter[str] = Counter()
    for doc in docs:
        counts.update(t for t in segmenter.cut(doc) if is_candidate_word(t))
    return Counter({w: c for w, c in counts.items() if c >= min_count})


def build_dictionary(
    domains: Mapping[str, Sequence[str]],
    *,
    background: Sequence[str] | None = None,
    settings: BuildSettings | None = None,
) -> Dictionary:
    """Build a dictionary from domain corpora.

    Args:
        domains: ``{domain name: documents}``.
        background: anti-domain corpus for every domain (``None``: each domain's anti-domain is all
            the other domains, which then needs at least two domains).
        settings: parameters (defaults: :class:`BuildSettings`).

    Returns:
        The fused :class:`Dictionary` (word → {domain: diff-idf}, freq = occurrences in its domains).

    Raises:
        BuildError: one domain without background, or an empty domain.

    Example:
        >>> d = build_dictionary({"finance": fin_docs, "sports": sport_docs})   # doctest: +SKIP
        >>> d.domain_words("finance")[:3]                                          # doctest: +SKIP
        ['A股', '基金', '净值']
    """
    s = settings or BuildSettings()
    if not domains:
        raise BuildError("no domain corpora given")
    for name, docs in domains.items():
        if not docs:
            raise BuildError(f"domain {name!r} has no documents")
    if background is None and len(domains) < 2:
        raise BuildError(f"diff-idf needs an anti-domain: give at least two domains or a background corpus (got only {next(iter(domains))!r})")

    segmenter = Segmenter()
    candidates: dict[str, set[str]] = {}
    freqs: Counter[str] = Counter()
    stats: dict = {"domains": {}, "background_docs": len(background) if background is not None else None}
    for name, docs in domains.items():
        found = {c.word: c.freq for c in discover(docs, s.discovery)}
        known = _known_words(docs, segmenter, s.known_min_count) if s.known_words else Counter()
        words = set(found) | set(known)
        for w in words:
            freqs[w] += max(found.get(w, 0), known.get(w, 0))
        candidates[name] = words
        stats["domains"][name] = {"docs": len(docs), "chars": sum(len(d) for d in docs), "new_words": len(found), "known_words": len(known)}
        logger.info("domain %s: %d docs, %d new-word candidates, %d known words", name, len(docs), len(found), len(known))

    vocabulary = set().union(*candidates.values())
    df: dict[str, Counter[str]] = {}
    n_docs: dict[str, int] = {}
    for name, docs in domains.items():
        df[name], n_docs[name] = document_frequencies(docs, vocabulary)
    if background is not None:
        bg_df, bg_n = document_frequencies(background, vocabulary)

    entries: list[Entry] = []
    for name in domains:
        if background is not None:
            anti_df, anti_n = bg_df, bg_n
        else:
            anti_df = Counter()
            for other in domains:
                if other != name:
                    anti_df.update(df[other])
            anti_n = sum(n for other, n in n_docs.items() if other != name)
        words = [w for w in candidates[name] if df[name][w] >= s.min_df]
        scores = score_domain(words, df[name], n_docs[name], anti_df, anti_n, smoothing=s.smoothing)
        kept = sorted(((sc, w) for w, sc in scores.items() if sc >= s.min_score), key=lambda t: (-t[0], t[1]))
        if s.top_n is not None:
            kept = kept[: s.top_n]
        stats["domains"][name]["kept"] = len(kept)
        entries.extend(Entry(w, name, round(sc, 6), freqs[w]) for sc, w in kept)
    return Dictionary(entries, params=s.to_dict(), stats=stats)


__all__ = ["BuildError", "BuildSettings", "build_dictionary"]
