"""Dictionary-aware segmentation (rjieba, HMM off) and keyword extraction."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING

import rjieba

if TYPE_CHECKING:
    from jingpai.keyword_dict.dictionary import Dictionary

logger = logging.getLogger(__name__)


class Segmenter:
    """Word segmentation with rjieba's dictionary plus a jingpai dictionary's words.

    HMM is off: rjieba then gives exactly jieba's tokens, and unknown words come from the dictionary
    rather than from guesses that differ between index time and query time.

    Args:
        dictionary: words to keep whole (``None``: rjieba's own dictionary only).

    Example:
        >>> Segmenter().cut("哪些因素会影响中国的GDP")
        ['哪些', '因素', '会', '影响', '中国', '的', 'GDP']
    """

    def __init__(self, dictionary: Dictionary | None = None) -> None:
        self.dictionary = dictionary
        self._jieba = rjieba.Jieba()
        if dictionary is not None:
            for line in dictionary.userdict_lines():
                word, freq, tag = line.split(" ")
                self._jieba.add_word(word, int(freq), tag)

    def cut(self, text: str) -> list[str]:
        """Tokens of ``text`` without whitespace-only tokens."""
        return [t for t in self._jieba.cut(text, hmm=False) if t.strip()]


@lru_cache(maxsize=8)
def _cached_segmenter(dictionary: Dictionary) -> Segmenter:
    return Segmenter(dictionary)


def extract_keywords(
    text: str,
    dictionary: Dictionary,
    *,
    top_k: int | None = 10,
    segmenter: Segmenter | None = None,
) -> list[tuple[str, float]]:
    """Rank the dictionary words of ``text`` by dictionary score × term frequency.

    Args:
        text: any text (query, title, document).
        dictionary: the keyword dictionary.
        top_k: keep this many (``None``: all).
        segmenter: reuse a :class:`Segmenter` built with ``dictionary`` (one is cached otherwise).

    Returns:
        ``[(word, weight), …]`` best first; ties keep the order of first occurrence.

    Example:
        >>> d = Dictionary.from_scores({"中国": {"politics": 1.2}, "GDP": {"finance": 3.0}})  # doctest: +SKIP
        >>> extract_keywords("哪些因素会影响中国的GDP", d)                                       # doctest: +SKIP
        [('GDP', 3.0), ('中国', 1.2)]
    """
    seg = segmenter or _cached_segmenter(dictionary)
    tf: Counter[str] = Counter()
    first: dict[str, int] = {}
    for i, token in enumerate(seg.cut(text)):
        if token in dictionary:
            tf[token] += 1
            first.setdefault(token, i)
    scored = [(w, dictionary.weight(w) * c) for w, c in tf.items()]
    scored = [(w, s) for w, s in scored if s > 0]
    scored.sort(key=lambda ws: (-ws[1], first[ws[0]]))
    return scored if top_k is None else scored[:top_k]


def keyword_spans(text: str, words: Iterable[str]) -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of non-overlapping occurrences of ``words`` in ``text``.

    Longer words win over shorter ones at the same place (``A股市场`` over ``A股``).

    Example:
        >>> keyword_spans("中国的GDP与中国", ["中国", "GDP"])
        [(0, 2), (3, 6), (7, 9)]
    """
    ordered = sorted({w for w in words if w}, key=len, reverse=True)
    if not ordered:
        return []
    pattern = re.compile("|".join(re.escape(w) for w in ordered))
    return [(m.start(), m.end()) for m in pattern.finditer(text)]


__all__ = ["Segmenter", "extract_keywords", "keyword_spans"]
