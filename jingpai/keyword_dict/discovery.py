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
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from jingpai.keyword_dict.text import is_candidate_word, segments

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
    """

    min_n: int = 2
    max_n: int = 6
    min_count: int = 5
    min_pmi: float = 3.0
    min_entropy: float = 1.0

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


def _encode(docs: Iterable[str]) -> tuple[list[str], dict[str, str]]:
    """Segments as strings of one character per unit (Latin runs → private-use characters).

    Slicing plain strings is several times faster than counting tuples of units.
    """
    codes: dict[str, str] = {}
    out: list[str] = []
    for doc in docs:
        for seg in segments(doc):
            chars = []
            for unit in seg:
                if len(unit) == 1:
                    chars.append(unit)
                else:
                    code = codes.get(unit)
                    if code is None:
                        code = codes[unit] = chr(0xF0000 + len(codes))  # supplementary private use area
                    chars.append(code)
            out.append("".join(chars))
    return out, {code: unit for unit, code in codes.items()}


def discover(docs: Iterable[str], settings: DiscoverySettings | None = None) -> list[Candidate]:
    """Find new-word candidates in ``docs``.

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
    segs, decode = _encode(docs)
    total_units = sum(len(seg) for seg in segs)
    if total_units == 0:
        return []
    # grams[n]: counts of n-grams, up to max_n + 1 so every candidate's neighbours are known
    grams: list[Counter[str]] = [Counter()]
    for n in range(1, s.max_n + 2):
        counter: Counter[str] = Counter()
        prev = grams[n - 1]
        for seg in segs:
            if len(seg) >= n:
                counter.update(seg[i : i + n] for i in range(len(seg) - n + 1))
        if n > 2:
            # an n-gram is frequent only if both its (n-1)-prefix and suffix are: drop the long tail early
            # for memory, but keep everything that extends a candidate (needed for its entropy)
            counter = Counter({g: c for g, c in counter.items() if prev.get(g[:-1], 0) >= s.min_count or prev.get(g[1:], 0) >= s.min_count})
        grams.append(counter)
    logger.info("discovery: %d units, %d distinct n-grams", total_units, sum(len(g) for g in grams))

    log_total = math.log(total_units)
    found: list[Candidate] = []
    for n in range(max(2, s.min_n), s.max_n + 1):
        # sum of c·log c over right / left extensions; with boundaries counting as distinct
        # neighbours (c = 1, c·log c = 0), H = log count − Σ c·log c / count
        right_sum: dict[str, float] = defaultdict(float)
        left_sum: dict[str, float] = defaultdict(float)
        current = grams[n]
        for g, c in grams[n + 1].items():
            clogc = c * math.log(c)
            if current.get(g[:-1], 0) >= s.min_count:
                right_sum[g[:-1]] += clogc
            if current.get(g[1:], 0) >= s.min_count:
                left_sum[g[1:]] += clogc
        for gram, count in current.items():
            if count < s.min_count:
                continue
            log_pw = math.log(count) - log_total
            pmi = min(
                log_pw - (math.log(grams[k][gram[:k]]) - log_total) - (math.log(grams[n - k][gram[k:]]) - log_total)
                for k in range(1, n)
            )
            if pmi < s.min_pmi:
                continue
            h_r = math.log(count) - right_sum.get(gram, 0.0) / count
            h_l = math.log(count) - left_sum.get(gram, 0.0) / count
            if min(h_l, h_r) < s.min_entropy:
                continue
            word = "".join(decode.get(ch, ch) for ch in gram)
            if not is_candidate_word(word):
                continue
            found.append(Candidate(word, count, pmi, h_l, h_r))
    found.sort(key=lambda c: (-c.freq, c.word))
    return found


__all__ = ["Candidate", "DiscoverySettings", "discover"]
