"""The keywords of texts under one dictionary: one segmenter and one ``top_k``, kept together.

Every component that needs "the dictionary words of this text, best first" (the indexer's keyword
fields, entity scoring's title entities, hard-negative mining, the keyword-aware models) holds a
:class:`KeywordExtractor` instead of passing a dictionary, a segmenter and a ``top_k`` to
:func:`~jingpai.keyword_dict.segment.extract_keywords` at every call.
"""

from __future__ import annotations

from collections.abc import Iterable

from jingpai.keyword_dict.dictionary import Dictionary
from jingpai.keyword_dict.segment import Segmenter, keyword_spans, keywords_from_tokens


class KeywordExtractor:
    """Ranks the dictionary words of a text by dictionary score × term frequency.

    Args:
        dictionary: the keyword dictionary.
        top_k: keywords kept per text (``None``: all).
        segmenter: a :class:`Segmenter` built with ``dictionary`` to share (default: a new one).

    Example:
        >>> d = Dictionary.from_scores({"中国": {"politics": 1.2}, "GDP": {"finance": 3.0}})
        >>> keywords = KeywordExtractor(d, top_k=5)
        >>> keywords.words("哪些因素会影响中国的GDP")
        ['GDP', '中国']
        >>> keywords.weighted("中国中国GDP")
        [('GDP', 3.0), ('中国', 2.4)]
        >>> keywords.spans("中国的GDP")
        [(0, 2), (3, 6)]
    """

    def __init__(self, dictionary: Dictionary, *, top_k: int | None = 10, segmenter: Segmenter | None = None) -> None:
        self.dictionary = dictionary
        self.top_k = top_k
        self.segmenter = segmenter if segmenter is not None else Segmenter(dictionary)
        # whitespace tokens are counted only if the dictionary holds one (a built one never does: it keeps no
        # whitespace), so the segmenter's whitespace filter can be skipped
        self._cut = self.segmenter.cut if any(w.isspace() for w in dictionary.weights()) else self.segmenter.cut_all

    def weighted(self, text: str) -> list[tuple[str, float]]:
        """``[(word, weight), …]`` best first; ties keep the order of first occurrence."""
        return self.weighted_tokens(self._cut(text))

    def weighted_tokens(self, tokens: Iterable[str]) -> list[tuple[str, float]]:
        """:meth:`weighted` for text already cut by :attr:`segmenter` (cutting twice doubles the cost)."""
        return keywords_from_tokens(tokens, self.dictionary, top_k=self.top_k)

    def words(self, text: str) -> list[str]:
        """The keywords of ``text`` without their weights, best first."""
        return [word for word, _ in self.weighted(text)]

    def spans(self, text: str, *, before: int | None = None) -> list[tuple[int, int]]:
        """Character spans of the keywords of ``text`` in it (see :func:`keyword_spans`; ``before``: only those
        starting before that character)."""
        words = self.words(text)
        return keyword_spans(text, words, before=before) if words else []


__all__ = ["KeywordExtractor"]
