"""Dictionary-aware segmentation (rjieba, HMM off) and keyword extraction."""

from __future__ import annotations

import heapq
import logging
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from operator import itemgetter
from typing import TYPE_CHECKING, Literal

import rjieba

if TYPE_CHECKING:
    from jingpai.keyword_dict.dictionary import Dictionary

logger = logging.getLogger(__name__)

Backend = Literal["rjieba", "jieba"]
BACKENDS: tuple[Backend, ...] = ("rjieba", "jieba")


class Segmenter:
    """Word segmentation with jieba's dictionary plus a jingpai dictionary's words.

    Two backends load the same dictionary: ``rjieba`` (default, Rust, many times faster) and ``jieba``
    (the reference). With HMM off — the default for indexing and queries, so the same text always gives
    the same tokens and new words come from the learned dictionary rather than from guesses — both give
    identical tokens.

    Args:
        dictionary: words to keep whole (``None``: jieba's own dictionary only).
        backend: ``rjieba`` or ``jieba``.
        hmm: let the HMM guess unknown words (backends then differ slightly).

    Example:
        >>> Segmenter().cut("哪些因素会影响中国的GDP")
        ['哪些因素', '会', '影响', '中国', '的', 'GDP']
    """

    def __init__(self, dictionary: Dictionary | None = None, *, backend: Backend = "rjieba", hmm: bool = False) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown segmenter backend {backend!r}; expected one of {', '.join(BACKENDS)}")
        self.dictionary = dictionary
        self.backend = backend
        self.hmm = hmm
        words = [line.split(" ") for line in dictionary.userdict_lines()] if dictionary is not None else []
        # Only words the base dictionary lacks are added: re-adding a known word would overwrite its
        # frequency (汽车 from tens of thousands down to ours) and the two backends book such overwrites
        # into their totals differently, which makes them disagree on unrelated close calls.
        if backend == "rjieba":
            self._rjieba = rjieba.Jieba()
            for word, freq, tag in words:
                if not self._rjieba.has_word(word):
                    self._rjieba.add_word(word, int(freq), tag)
        else:
            import jieba

            self._jieba = jieba.Tokenizer()
            self._jieba.initialize()
            for word, freq, tag in words:
                if not self._jieba.FREQ.get(word):
                    self._jieba.add_word(word, int(freq), tag)

    def __deepcopy__(self, memo: dict) -> Segmenter:
        # A built segmenter never changes (its words are fixed here) and rjieba's Rust object cannot be copied,
        # so a deep copy of what holds one (the rerank service's own copy of a kwbert model) shares it.
        return self

    def cut(self, text: str) -> list[str]:
        """Tokens of ``text`` without whitespace-only tokens."""
        if self.backend == "rjieba":
            tokens = self._rjieba.cut(text, hmm=self.hmm)
        else:
            tokens = self._jieba.lcut(text, HMM=self.hmm)
        return list(filter(str.strip, tokens))  # drop whitespace tokens (C-level filter: hot path)

    def cut_all(self, text: str) -> list[str]:
        """Tokens of ``text``, whitespace-only ones included (:meth:`cut` less its filter: for counting dictionary words,
        which never are whitespace, the filter is 10 % of the work)."""
        if self.backend == "rjieba":
            return self._rjieba.cut(text, hmm=self.hmm)
        return self._jieba.lcut(text, HMM=self.hmm)


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
    return keywords_from_tokens(seg.cut(text), dictionary, top_k=top_k)


def keywords_from_tokens(
    tokens: Iterable[str], dictionary: Dictionary, *, top_k: int | None = 10
) -> list[tuple[str, float]]:
    """:func:`extract_keywords` for text already segmented with a :class:`Segmenter` of ``dictionary``."""
    weights = dictionary.weights()
    # Only dictionary words are counted (a C-level filter: most tokens are not keywords, and this runs
    # once per indexed document). Counter keeps first-occurrence order, and the sort is stable: ties
    # stay in text order.
    counts = Counter(filter(weights.__contains__, tokens))
    scored = [(w, s) for w, s in ((w, weights[w] * c) for w, c in counts.items()) if s > 0]
    if top_k is None:
        scored.sort(key=lambda ws: -ws[1])
        return scored
    # nlargest is sorted(reverse=True)[:top_k], which keeps ties in text order as the stable sort by -score does
    return heapq.nlargest(top_k, scored, key=itemgetter(1))


def keyword_spans(text: str, words: Iterable[str], *, before: int | None = None) -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of non-overlapping occurrences of ``words`` in ``text``.

    Longer words win over shorter ones at the same place (``A股市场`` over ``A股``); scanning goes left to right,
    each match resuming after the previous one, as a regular expression of the words (longest first) finds them.
    The occurrences are found with ``str.find``, word by word: compiling that expression cost 300-500 µs a text
    (each text has its own keywords), ten times the search.

    Args:
        text: the text to search.
        words: the words to find.
        before: only the spans that start before this character (``None``: all); the scan goes left to right, so they
            are the same as the whole text's (a model that keeps a text's first tokens searches only that far).

    Example:
        >>> keyword_spans("中国的GDP与中国", ["中国", "GDP"])
        [(0, 2), (3, 6), (7, 9)]
        >>> keyword_spans("中国的GDP与中国", ["中国", "GDP"], before=4)
        [(0, 2), (3, 6)]
    """
    found: list[tuple[int, int]] = []  # (start, -length) of every occurrence, overlapping ones included
    for word in {w for w in words if w}:
        # an occurrence starting before ``before`` lies within text[:before + len(word) - 1]
        stop = len(text) if before is None else max(before + len(word) - 1, 0)
        at = text.find(word, 0, stop)
        while at >= 0:
            found.append((at, -len(word)))
            at = text.find(word, at + 1, stop)
    found.sort()  # leftmost first, the longest word at a place first
    out: list[tuple[int, int]] = []
    pos = 0
    for start, neg in found:
        if start >= pos:
            out.append((start, start - neg))
            pos = start - neg
    return out


__all__ = ["Segmenter", "extract_keywords", "keyword_spans", "keywords_from_tokens"]
