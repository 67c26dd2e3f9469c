"""Build a fused domain dictionary: discover words per domain, score them with diff-idf, threshold, fuse."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import lru_cache

from jingpai.keyword_dict.diffidf import grouped_document_frequencies, score_domain
from jingpai.keyword_dict.dictionary import Dictionary, Entry
from jingpai.keyword_dict.discovery import DiscoverySettings, discover
from jingpai.keyword_dict.segment import Segmenter
from jingpai.keyword_dict.text import is_candidate_word

logger = logging.getLogger(__name__)


#: below this many characters in all corpora together, process start-up costs more than it saves
PARALLEL_MIN_CHARS = 5_000_000
#: a domain with fewer documents gets a warning: its document frequencies are too coarse for diff-idf
FEW_DOCS = 20


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
        workers: processes for the per-domain work (``None``: one per CPU core when the corpora hold at
            least :data:`PARALLEL_MIN_CHARS` characters, else in-process; 1: in-process).
    """

    discovery: DiscoverySettings = field(default_factory=DiscoverySettings)
    known_words: bool = True
    known_min_count: int = 3
    smoothing: float = 1.0
    min_score: float = 0.5
    min_df: int = 2
    top_n: int | None = 5000
    workers: int | None = None

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("workers")  # how fast, not what: must not change the recorded parameters
        return data


@lru_cache(maxsize=1)
def _plain_segmenter() -> Segmenter:
    return Segmenter()


def _known_words(docs: Sequence[str], min_count: int) -> Counter[str]:
    segmenter = _plain_segmenter()
    counts: Counter[str] = Counter()
    for doc in docs:
        counts.update(segmenter.cut(doc))
    return Counter({w: c for w, c in counts.items() if c >= min_count and is_candidate_word(w)})


def _candidates(docs: Sequence[str], s: BuildSettings) -> tuple[dict[str, int], Counter[str]]:
    found = {c.word: c.freq for c in discover(docs, s.discovery)}
    known = _known_words(docs, s.known_min_count) if s.known_words else Counter()
    return found, known


@contextlib.contextmanager
def _pool(workers: int) -> Iterator[Callable]:
    """``map``-like callable: a spawn-context process pool (safe next to torch threads), or in-process."""
    if workers <= 1:
        yield lambda fn, *its: list(map(fn, *its))
        return
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as ex:
        yield lambda fn, *its: list(ex.map(fn, *its))


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

    for name, docs in domains.items():
        if len(docs) < FEW_DOCS:
            logger.warning("domain %r has only %d documents (< %d): its diff-idf scores will be coarse", name, len(docs), FEW_DOCS)
    names = list(domains)
    chars = sum(len(d) for docs in domains.values() for d in docs) + sum(len(d) for d in background or ())
    if s.workers is not None:
        workers = s.workers
    elif chars >= PARALLEL_MIN_CHARS:
        workers = os.cpu_count() or 1
    else:
        workers = 1
        logger.info("%d characters in all: building in-process (parallel from %d)", chars, PARALLEL_MIN_CHARS)
    workers = min(workers, len(names) + (background is not None))
    with _pool(workers) as pmap:
        per_domain = pmap(_candidates, [domains[n] for n in names], [s] * len(names))
        candidates, freqs, stats = _fuse_candidates(names, domains, per_domain)
        stats["background_docs"] = len(background) if background is not None else None
    vocabulary = sorted(set().union(*candidates.values()))
    corpora = [domains[n] for n in names] + ([background] if background is not None else [])
    counted = grouped_document_frequencies(corpora, vocabulary)
    df = {n: counted[i][0] for i, n in enumerate(names)}
    n_docs = {n: counted[i][1] for i, n in enumerate(names)}
    if background is not None:
        bg_df, bg_n = counted[-1]
    return _score(names, candidates, df, n_docs, (bg_df, bg_n) if background is not None else None, freqs, stats, s)


def _fuse_candidates(names, domains, per_domain) -> tuple[dict[str, set[str]], Counter[str], dict]:
    candidates: dict[str, set[str]] = {}
    freqs: Counter[str] = Counter()
    stats: dict = {"domains": {}}
    for name, (found, known) in zip(names, per_domain):
        docs = domains[name]
        words = set(found) | set(known)
        for w in words:
            freqs[w] += max(found.get(w, 0), known.get(w, 0))
        candidates[name] = words
        stats["domains"][name] = {"docs": len(docs), "chars": sum(len(d) for d in docs), "new_words": len(found), "known_words": len(known)}
        logger.info("domain %s: %d docs, %d new-word candidates, %d known words", name, len(docs), len(found), len(known))
    return candidates, freqs, stats


def _score(names, candidates, df, n_docs, background, freqs, stats, s: BuildSettings) -> Dictionary:
    entries: list[Entry] = []
    for name in names:
        if background is not None:
            anti_df, anti_n = background
        else:
            anti_df = Counter()
            for other in names:
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
