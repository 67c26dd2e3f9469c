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

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from jingpai.keyword_dict.ngrams import Level, UnitCodec, chunks, count_level, hash_rows, merge, prune
from jingpai.keyword_dict.text import is_candidate_word

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DiscoverySettings:
    """Thresholds of new-word discovery.

    Args:
        min_n: shortest candidate, in units (Han characters or Latin/digit runs).
        max_n: longest candidate, in units.
        min_count: minimum occurrences in the corpus.
        min_pmi: minimum PMI of the weakest split (natural log).
        min_entropy: minimum of left and right neighbour entropy (nats).
        chunk_chars: the corpus is counted in chunks of about this many characters.
        max_table: when an n-gram table grows past this many entries, its rarest n-grams are pruned
            (lossy counting: bounded memory, counts of very rare n-grams become approximate).
    """

    min_n: int = 2
    max_n: int = 6
    min_count: int = 5
    min_pmi: float = 3.0
    min_entropy: float = 1.0
    chunk_chars: int = 2_000_000
    max_table: int = 4_000_000

    def __post_init__(self) -> None:
        if not 1 <= self.min_n <= self.max_n:
            raise ValueError(f"n-gram range must satisfy 1 <= min_n <= max_n, got min_n={self.min_n}, max_n={self.max_n}")
        if self.min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {self.min_count}")


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
    s = settings or DiscoverySettings()
    codec = UnitCodec()
    top = s.max_n + 1  # counts up to max_n + 1 so every candidate's neighbours are known
    levels = [Level.empty(n) for n in range(top + 1)]
    total_units = 0
    for batch in chunks(docs, s.chunk_chars):
        ids, _, _ = codec.encode_docs(batch)
        total_units += int(np.count_nonzero(ids))
        for n in range(1, top + 1):
            levels[n] = _bound(merge(levels[n], count_level(ids, n)), s, n)
    if total_units == 0:
        return []
    logger.info("discovery: %d units, %d distinct n-grams", total_units, sum(len(lv) for lv in levels))

    log_total = math.log(total_units)
    found: list[Candidate] = []
    for n in range(max(2, s.min_n), s.max_n + 1):
        level = levels[n]
        mask = level.counts >= s.min_count
        if not mask.any():
            continue
        units, counts = level.units[mask], level.counts[mask].astype(np.float64)
        log_c = np.log(counts)
        pmi = np.full(counts.shape[0], np.inf)
        for k in range(1, n):
            left_c = levels[k].lookup(hash_rows(units[:, :k])).astype(np.float64)
            right_c = levels[n - k].lookup(hash_rows(units[:, k:])).astype(np.float64)
            pmi = np.minimum(pmi, log_c + log_total - np.log(left_c) - np.log(right_c))
        # Σ c·log c over right / left extensions; boundaries and pruned singletons are distinct
        # neighbours with c·log c = 0, so H = log count − Σ c·log c / count
        nxt = levels[n + 1]
        clogc = nxt.counts * np.log(np.maximum(nxt.counts, 1))
        sums = []
        cand = Level(level.keys[mask], level.counts[mask], units)  # still sorted: a small table to search
        for keys in (hash_rows(nxt.units[:, :n]), hash_rows(nxt.units[:, 1:])):
            rows = cand.index_of(keys)
            hit = rows >= 0
            sums.append(np.bincount(rows[hit], weights=clogc[hit], minlength=len(cand)))
        h_r = log_c - sums[0] / counts
        h_l = log_c - sums[1] / counts
        keep = np.flatnonzero((pmi >= s.min_pmi) & (np.minimum(h_l, h_r) >= s.min_entropy))
        for i in keep:
            word = codec.decode(units[i])
            if is_candidate_word(word):
                found.append(Candidate(word, int(counts[i]), float(pmi[i]), float(h_l[i]), float(h_r[i])))
    found.sort(key=lambda c: (-c.freq, c.word))
    return found


__all__ = ["Candidate", "DiscoverySettings", "discover"]
