"""New-word discovery over a corpus: frequent, internally sticky (PMI), free at both edges (entropy).

For every n-gram of units (:mod:`jingpai.keyword_dict.text`) with ``min_n ≤ n ≤ max_n``:

- ``freq`` — occurrences in the corpus;
- ``pmi`` — ``min over splits (a, b) of log(p(w) / (p(a) p(b)))`` with ``p(x) = count(x) / total units``:
  the weakest split decides, so ``中国的`` is rejected even though ``中国`` is sticky;
- ``left_entropy`` / ``right_entropy`` — entropy of the unit just before / after ``w``. A segment
  boundary counts as a distinct neighbour each time, so a word that often starts a sentence is free.

A candidate is kept when all four pass their thresholds (:class:`DiscoverySettings`).
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from jingpai.keyword_dict.settings import DiscoverySettings
from jingpai.keyword_dict.ngrams import (
    RUN_BASE,
    Level,
    Ranked,
    UnitCodec,
    chunks,
    count_levels,
    hash_rows,
    member,
    merge,
    prune,
    rank_levels,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    """A discovered word and the statistics that admitted it."""

    word: str
    freq: int
    pmi: float
    left_entropy: float
    right_entropy: float


def _bound(level: Level, s: DiscoverySettings, n: int) -> Level:
    threshold = 2
    while len(level) > s.max_table and threshold <= s.min_count:
        before = len(level)
        level = prune(level, threshold)
        logger.info("pruned %d-gram table from %d to %d entries (count < %d)", n, before, len(level), threshold)
        threshold += 1
    return level


@dataclass(frozen=True)
class Found:
    """Discovered words as columns (what :func:`discover` returns, without a Python object per word)."""

    words: list[str]
    freq: np.ndarray
    pmi: np.ndarray
    left_entropy: np.ndarray
    right_entropy: np.ndarray


def find_words(docs: Iterable[str], settings: DiscoverySettings | None = None) -> Found:
    """:func:`discover` as columns, in no particular order (the fast path for dictionary builds).

    Args:
        docs: the corpus, one string per document.
        settings: thresholds (defaults: :class:`DiscoverySettings`).

    Returns:
        The candidates' words and statistics (:class:`Found`).

    Example:
        >>> docs = ["区块链技术发展", "区块链应用落地", "发展区块链产业"] * 3
        >>> found = find_words(docs, DiscoverySettings(min_count=3, min_pmi=0.5, min_entropy=0.5))
        >>> "区块链" in found.words
        True
    """
    s = settings or DiscoverySettings()
    codec = UnitCodec()
    top = s.max_n + 1  # counts up to max_n + 1 so every candidate's neighbours are known
    batches = chunks(docs, s.chunk_chars)
    first = next(batches, None)
    second = next(batches, None)
    if second is None:
        ids, _, _ = codec.encode_docs(first or [], owners=False)
        total_units = int(np.count_nonzero(ids))
        # one chunk: its counts are final, so only what the candidates' statistics read needs a rank
        ranked = rank_levels(ids, top, min_count=s.min_count)
        logger.info("discovery: %d units in one chunk, %d distinct n-grams ranked", total_units, sum(len(lv) for lv in ranked))
        level_words = functools.partial(_ranked_words, ranked, ids)
    else:
        levels = [Level.empty(n) for n in range(top + 1)]
        total_units = 0
        for batch in itertools.chain([first, second], batches):
            ids, _, _ = codec.encode_docs(batch, owners=False)
            total_units += int(np.count_nonzero(ids))
            for n, counted in enumerate(count_levels(ids, top)[1:], start=1):
                levels[n] = _bound(merge(levels[n], counted), s, n)
        logger.info("discovery: %d units, %d distinct n-grams tabled", total_units, sum(len(lv) for lv in levels))
        level_words = functools.partial(_table_words, levels)
    parts = []
    if total_units:
        log_total = math.log(total_units)
        digits = codec.digit_runs(), codec.digit_runs(min_len=4)
        for n in range(max(2, s.min_n), s.max_n + 1):
            units, counts, pmi, h_l, h_r = level_words(n, s, log_total)
            keep = (pmi >= s.min_pmi) & (np.minimum(h_l, h_r) >= s.min_entropy) & _candidate_units(units, *digits)
            parts.append((codec.decode_rows(units[keep]), counts[keep].astype(np.int64), pmi[keep], h_l[keep], h_r[keep]))
    if not parts:
        return Found([], np.zeros(0, np.int64), *(np.zeros(0) for _ in range(3)))
    return Found([w for p in parts for w in p[0]], *(np.concatenate([p[i] for p in parts]) for i in range(1, 5)))


def candidate_mask(words: Sequence[str]) -> np.ndarray:
    """:func:`~jingpai.keyword_dict.text.is_candidate_word` of every word, vectorised.

    Example:
        >>> candidate_mask(["A股", "中", "GDP", "跌2", "2010"]).tolist()
        [True, False, True, False, False]
    """
    codec = UnitCodec()
    n_units, ids = codec.encode_words(words)
    ok = np.zeros(n_units.shape[0], bool)
    several = np.flatnonzero(n_units >= 2)  # no number at the end, no number of 4 digits or more inside
    ok[several] = ~member(ids[np.cumsum(n_units)[several] - 1], codec.digit_runs())
    ok[np.repeat(np.arange(n_units.shape[0]), n_units)[member(ids, codec.digit_runs(min_len=4))]] = False
    for i in np.flatnonzero(n_units == 1).tolist():  # one unit: a Latin run such as GDP, not a number
        w = words[i]
        ok[i] = len(w) >= 2 and w.isascii() and not w.isdigit()
    return ok


def _candidate_units(units: np.ndarray, digits: np.ndarray, long_digits: np.ndarray) -> np.ndarray:
    """:func:`~jingpai.keyword_dict.text.is_candidate_word` of n-grams of ``n >= 2`` units, vectorised:
    no number (a unit of ``digits``) at the end, no number of 4 digits or more (``long_digits``) inside."""
    ok = np.ones(units.shape[0], bool)
    latin = np.flatnonzero((units >= RUN_BASE).any(axis=1))
    if latin.shape[0]:
        rows = units[latin]
        ok[latin] = ~(member(rows[:, -1], digits) | member(rows, long_digits).any(axis=1))
    return ok


def _ranked_words(levels: list[Ranked], ids: np.ndarray, n: int, s: DiscoverySettings, log_total: float):
    """``(units, counts, pmi, left entropy, right entropy)`` of the n-grams seen ``min_count`` times, from
    the ranks of one chunk."""
    level = levels[n]
    rows = np.flatnonzero(level.counts >= s.min_count)
    rep, counts = level.rep[rows], level.counts[rows].astype(np.float64)
    log_c = np.log(counts)
    pmi = weakest_split_pmi(log_c, log_total, (
        (levels[k].counts[levels[k].rank[rep]], levels[n - k].counts[levels[n - k].rank[rep + k]]) for k in range(1, n)
    ))
    # Σ c·log c over right / left extensions, the (n+1)-grams whose prefix / suffix is the word;
    # boundaries and singletons are distinct neighbours with c·log c = 0, so H = log count − Σ c·log c / count
    nxt = levels[n + 1]
    clogc = nxt.counts * np.log(nxt.counts)
    right = np.bincount(nxt.prefix, weights=clogc, minlength=len(level))[rows]
    left = np.bincount(nxt.suffix, weights=clogc, minlength=len(level))[rows]
    units = ids[rep[:, None] + np.arange(n)]
    return units, counts, pmi, edge_entropy(log_c, counts, left), edge_entropy(log_c, counts, right)


def weakest_split_pmi(log_c: np.ndarray, log_total: float, splits: Iterable[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """PMI of the weakest split: ``min over splits of log c(w) + log total − log c(a) − log c(b)``.

    Args:
        log_c: ``log`` of each n-gram's count.
        log_total: ``log`` of the units in the corpus.
        splits: per split point, the counts of the left and right parts of every n-gram.
    """
    pmi = np.full(log_c.shape[0], np.inf)
    for left_c, right_c in splits:
        pmi = np.minimum(pmi, log_c + log_total - np.log(left_c.astype(np.float64)) - np.log(right_c.astype(np.float64)))
    return pmi


def edge_entropy(log_c: np.ndarray, counts: np.ndarray, clogc: np.ndarray) -> np.ndarray:
    """Neighbour entropy at one edge, from ``Σ c·log c`` over the n-gram's extensions at that edge.

    Boundaries and singletons are distinct neighbours with ``c·log c = 0``, so
    ``H = log count − Σ c·log c / count``.
    """
    return log_c - clogc / counts


def _table_words(levels: list[Level], n: int, s: DiscoverySettings, log_total: float):
    """:func:`_ranked_words` from n-gram tables merged over chunks."""
    level = levels[n]
    mask = level.counts >= s.min_count
    units, counts = level.units[mask], level.counts[mask].astype(np.float64)
    log_c = np.log(counts)
    pmi = weakest_split_pmi(log_c, log_total, (
        (levels[k].lookup(hash_rows(units[:, :k])), levels[n - k].lookup(hash_rows(units[:, k:]))) for k in range(1, n)
    ))
    # Σ c·log c over right / left extensions; boundaries and pruned singletons are distinct
    # neighbours with c·log c = 0, so H = log count − Σ c·log c / count
    nxt = levels[n + 1]
    nxt = prune(nxt, 2) if len(nxt) and nxt.counts.min() < 2 else nxt  # c·log c = 0 for c = 1
    clogc = nxt.counts * np.log(nxt.counts)
    sums = []
    cand = Level(level.keys[mask], level.counts[mask], units)  # still sorted: a small table to search
    for keys in (hash_rows(nxt.units[:, :n]), hash_rows(nxt.units[:, 1:])):
        rows = cand.index_of(keys)
        hit = rows >= 0
        sums.append(np.bincount(rows[hit], weights=clogc[hit], minlength=len(cand)))
    return units, counts, pmi, edge_entropy(log_c, counts, sums[1]), edge_entropy(log_c, counts, sums[0])


def discover(docs: Iterable[str], settings: DiscoverySettings | None = None) -> list[Candidate]:
    """Find new-word candidates in ``docs`` (streamed in chunks; memory bounded by the n-gram tables).

    Args:
        docs: the corpus, one string per document.
        settings: thresholds (defaults: :class:`DiscoverySettings`).

    Returns:
        Candidates sorted by descending frequency (ties by word).

    Example:
        >>> docs = ["区块链技术发展", "区块链应用落地", "发展区块链产业"] * 3
        >>> [c.word for c in discover(docs, DiscoverySettings(min_count=3, min_pmi=0.5, min_entropy=0.5))][:1]
        ['区块链']
    """
    f = find_words(docs, settings)
    found = [
        Candidate(w, int(c), float(p), float(hl), float(hr))
        for w, c, p, hl, hr in zip(f.words, f.freq.tolist(), f.pmi.tolist(), f.left_entropy.tolist(), f.right_entropy.tolist())
    ]
    found.sort(key=lambda c: (-c.freq, c.word))
    return found


__all__ = ["Candidate", "DiscoverySettings", "Found", "candidate_mask", "discover", "edge_entropy", "find_words", "weakest_split_pmi"]
