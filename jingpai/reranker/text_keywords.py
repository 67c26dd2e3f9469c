"""A keyword model's keywords per text: found once by its dictionary's extractor, or given with the request.

Keyword rerankers (``kwbert``, ``use-kw``) rank the dictionary words of each whole text and keep the top k. Finding
them means segmenting the text (rjieba, 85–95 µs for a 512-character passage): most of such a model's host work
per pair for a document it has not seen. The indexer can store each document's keywords once
(``jingpai index --rerank-keywords``) and the gateway sends them with the hits; :meth:`TextKeywords.give` takes
them — only when they were ranked with the model's own dictionary version and are long enough to hold its top k,
so a model never reads keywords it would not have found itself.

Example:
    >>> found = TextKeywords(lambda text: ["中国"] if "中国" in text else [], top_k=2, version="v1")
    >>> found("中国的GDP")
    ('中国',)
    >>> found.give(["GDP与中国"], [["GDP", "中国", "与"]], version="v1", top_k=20)
    1
    >>> found("GDP与中国")
    ('GDP', '中国')
    >>> found.give(["今天"], [["今天"]], version="v0", top_k=20)  # another dictionary's keywords: not taken
    0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


class TextKeywords:
    """``keywords(text)``: the model's top ``top_k`` keywords of ``text``, cached; :meth:`give` stores known ones.

    Args:
        compute: the model's own extraction (best first), called for a text neither seen nor given.
        top_k: how many keywords the model keeps per text.
        version: the version of the dictionary ``compute`` ranks with (``None``: no dictionary; nothing is taken).
        maxsize: texts remembered; the cache is cleared whole when full (a training epoch revisits every text once,
            a request's query is in every one of its pairs).
    """

    def __init__(self, compute: Callable[[str], Sequence[str]], *, top_k: int, version: str | None, maxsize: int = 50_000) -> None:
        self._compute = compute
        self.top_k = top_k
        self.version = version
        self._maxsize = maxsize
        self._known: dict[str, tuple[str, ...]] = {}

    def __call__(self, text: str) -> tuple[str, ...]:
        words = self._known.get(text)
        if words is None:
            words = tuple(self._compute(text))[: self.top_k]
            self._remember(text, words)
        return words

    def _remember(self, text: str, words: tuple[str, ...]) -> None:
        if len(self._known) >= self._maxsize:
            self._known.clear()  # atomic under the GIL: another thread's miss computes again
        self._known[text] = words

    def give(self, texts: Sequence[str], words: Sequence[Sequence[str] | None], *, version: str, top_k: int) -> int:
        """Take ``words[i]`` as the keywords of ``texts[i]`` (best first, ranked by dictionary ``version``, at most
        ``top_k`` of them kept); returns how many were taken.

        Nothing is taken from another dictionary version; a ``None`` entry (keywords unknown) is skipped, and so is a
        list holding exactly ``top_k < self.top_k`` words (the text may have more keywords than were kept).
        """
        if version != self.version:
            return 0
        taken = 0
        for text, given in zip(texts, words, strict=True):
            if given is None or (top_k < self.top_k and len(given) >= top_k):
                continue
            self._remember(text, tuple(given[: self.top_k]))
            taken += 1
        return taken

    def cache_clear(self) -> None:
        """Forget every text (a benchmark measuring cold documents)."""
        self._known.clear()


__all__ = ["TextKeywords"]
