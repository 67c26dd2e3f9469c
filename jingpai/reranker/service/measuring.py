"""Token counts and token-window cuts of texts as the model will see them (:class:`TextMeasure`).

The service measures before it batches: a pair's padded length decides its batch, a document's token
spans decide where it is cut (truncation) or split (``max-chunks``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from jingpai.cjk import HAN_CLASS
from jingpai.reranker.base import Reranker

logger = logging.getLogger(__name__)


class TextMeasure:
    """Token counts and token-window cuts of texts, as the model will see them.

    Models with a fast Hugging Face tokenizer (``model.tokenizer``) are measured exactly; others use a
    cheap estimate (one token per CJK character, one per Latin word piece of up to 6 letters, one per
    other symbol), which only steers batching and chunking — the model still truncates on its own.
    """

    _UNIT = re.compile(rf"[{HAN_CLASS}]|[^\W{HAN_CLASS}]+|[^\w\s]", re.UNICODE)

    def __init__(self, model: Reranker) -> None:
        tokenizer = getattr(model, "tokenizer", None)
        # an own copy of the Rust tokenizer, without truncation or padding: it keeps per-call state, so
        # sharing it with the worker thread's featurize() would corrupt batches. It is called directly:
        # the transformers wrapper's per-token Python conversion costs as much as tokenizing.
        self._tokenizer: Any = None
        if getattr(tokenizer, "is_fast", False):
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
            self._tokenizer.no_truncation()
            self._tokenizer.no_padding()
        if self._tokenizer is not None:
            self.pair_overhead = int(tokenizer.num_special_tokens_to_add(pair=True))
            self.exact = True
        else:
            logger.info("model %s has no fast tokenizer: batch budgets and chunks use estimated token counts", model.name)
            self.pair_overhead = 3
            self.exact = False

    def spans(self, texts: Sequence[str], *, cap: int) -> list[tuple[list[tuple[int, int]], bool]]:
        """Per text: the (start, end) character spans of its first ``cap`` tokens, and whether it has more.

        Only a prefix of a long text is tokenized (grown until it holds ``cap`` tokens that are far enough
        from the cut to be tokenized as in the whole text), so a 100 kB document costs what ``cap`` tokens
        cost.
        """
        if self._tokenizer is None:
            return [self._estimated_capped(t, cap) for t in texts]

        def judge(text: str, prefix: str, enc: Any) -> tuple[list[tuple[int, int]], bool] | None:
            spans = list(enc.offsets)
            if len(prefix) == len(text):
                return self._capped(spans, cap)
            # a token ending well before the cut is the same token in the whole text
            stable = [sp for sp in spans if sp[1] <= len(prefix) - 32]
            return (stable[:cap], True) if len(stable) > cap else None

        # CJK: one token per character; Latin text needs a longer prefix (grown)
        return self._grow(texts, 2 * cap + 64, judge, lambda t: self._estimated_capped(t, cap))

    def tail_spans(self, texts: Sequence[str], *, cap: int) -> list[tuple[list[tuple[int, int]], bool]]:
        """Per text: the (start, end) character spans of its last ``cap`` tokens, and whether it has more before them.

        :meth:`spans` from the other end: only a suffix of a long text is tokenized (grown until it holds
        ``cap`` tokens far enough from its cut), for cutting a document's head (TEI's ``truncation_direction=Left``).
        """
        if self._tokenizer is None:
            return [self._tail(self._estimated_spans(t), cap) for t in texts]

        def judge(text: str, suffix: str, enc: Any) -> tuple[list[tuple[int, int]], bool] | None:
            shift = len(text) - len(suffix)
            spans = [(start + shift, end + shift) for start, end in enc.offsets]
            if shift == 0:
                return self._tail(spans, cap)
            # a token starting well after the cut is the same token in the whole text
            stable = [sp for sp in spans if sp[0] >= shift + 32]
            return (stable[-cap:], True) if len(stable) > cap else None

        return self._grow(texts, 2 * cap + 64, judge, lambda t: self._tail(self._estimated_spans(t), cap), from_end=True)

    def _grow(
        self, texts: Sequence[str], chars: int, judge: Callable[[str, str, Any], Any], estimate: Callable[[str], Any], *, from_end: bool = False
    ) -> list[Any]:
        """``judge(text, piece, encoding)`` per text on prefixes (``from_end``: suffixes) of ``chars`` characters,
        4× longer for those it answers ``None`` (too short to tell); ``estimate(text)`` where the tokenizer refuses one."""
        out: list[Any] = [None] * len(texts)
        todo = list(range(len(texts)))
        while todo:
            prefixes = [texts[i][-chars:] if from_end else texts[i][:chars] for i in todo]
            retry = []
            for i, prefix, enc in zip(todo, prefixes, self._encode(prefixes), strict=True):
                out[i] = estimate(texts[i]) if enc is None else judge(texts[i], prefix, enc)
                if out[i] is None:
                    retry.append(i)
            todo = retry
            chars *= 4
        return out

    @staticmethod
    def _tail(spans: list[tuple[int, int]], cap: int) -> tuple[list[tuple[int, int]], bool]:
        return (spans[-cap:] if cap > 0 else []), len(spans) > cap

    @staticmethod
    def _capped(spans: list[tuple[int, int]], cap: int) -> tuple[list[tuple[int, int]], bool]:
        return spans[:cap], len(spans) > cap

    def _encode(self, texts: list[str]) -> list[Any]:
        """Rust ``Encoding`` per text (no special tokens); ``None`` where the tokenizer refuses a text."""
        assert self._tokenizer is not None
        try:
            return self._tokenizer.encode_batch(texts, add_special_tokens=False)
        except Exception as exc:  # noqa: BLE001 - measuring only steers batching; the model judges the input
            if len(texts) == 1:
                logger.info("tokenizer cannot measure a text (%s: %s); using the estimate", type(exc).__name__, exc)
                return [None]
            return [self._encode([t])[0] for t in texts]

    def cuts(self, texts: Sequence[str], *, cap: int) -> list[tuple[int, int, bool]]:
        """Per text: ``(tokens, end, more)`` — its token count up to ``cap``, the character offset where its
        first ``cap`` tokens end, and whether it has more than ``cap`` tokens.

        What :meth:`spans` says, without building every token's span: the cheap path for truncation.
        """
        if self._tokenizer is None:
            return [self._cut_of(*self._estimated_capped(t, cap)) for t in texts]

        def judge(text: str, prefix: str, enc: Any) -> tuple[int, int, bool] | None:
            n = len(enc)
            if len(prefix) == len(text):
                k = min(n, cap)
                return k, enc.token_to_chars(k - 1)[1] if k else 0, n > cap
            if n > cap and enc.token_to_chars(cap)[1] <= len(prefix) - 32:
                # token ``cap`` ends well before the cut, so the first ``cap`` are as in the whole text
                return cap, enc.token_to_chars(cap - 1)[1], True
            return None

        # CJK text needs about one character per token; Latin text (~4 per token) takes the retry
        return self._grow(texts, cap + cap // 4 + 64, judge, lambda t: self._cut_of(*self._estimated_capped(t, cap)))

    @staticmethod
    def _cut_of(spans: list[tuple[int, int]], more: bool) -> tuple[int, int, bool]:
        return len(spans), spans[-1][1] if spans else 0, more

    def _estimated_capped(self, text: str, cap: int) -> tuple[list[tuple[int, int]], bool]:
        """:meth:`_capped` of the estimate, scanning ``text`` only until it has more than ``cap`` tokens."""
        return self._capped(self._estimated_spans(text, limit=cap + 1), cap)

    def _estimated_spans(self, text: str, *, limit: int | None = None) -> list[tuple[int, int]]:
        """Estimated token spans of ``text``; with ``limit``, only its first ``limit`` or more (enough to tell
        whether it has more than ``limit - 1``): a news article is thousands of characters, of which a
        64-token model reads a hundred, and scanning the rest cost as much as scoring it."""
        spans: list[tuple[int, int]] = []
        for m in self._UNIT.finditer(text):
            start, end = m.span()
            # long Latin words become several word pieces in a real tokenizer
            spans.extend((s, min(s + 6, end)) for s in range(start, end, 6))
            if limit is not None and len(spans) >= limit:
                break
        return spans

    def lengths(self, texts: Sequence[str], *, cap: int = 1 << 30) -> list[int]:
        """Tokens per text without special tokens; ``cap + 1`` stands for "more than ``cap``"."""
        return [n + more for n, _end, more in self.cuts(texts, cap=cap)]

    @staticmethod
    def windows(text: str, spans: list[tuple[int, int]], *, size: int, stride: int, limit: int) -> list[str]:
        """Up to ``limit`` substrings of at most ``size`` tokens starting every ``stride`` tokens (from :meth:`spans`)."""
        out: list[str] = []
        for start in range(0, len(spans), stride):
            end = min(start + size, len(spans))
            out.append(text[spans[start][0] : spans[end - 1][1]])
            if end == len(spans) or len(out) == limit:
                break
        return out



def longest_first(query: int, doc: int, budget: int) -> tuple[int, int]:
    """The (query, document) token counts that longest-first truncation keeps of a pair within ``budget``
    tokens (Hugging Face tokenizers' rule: the longer side is cut first; cut to halves, the odd token goes to
    the longer side).

    >>> longest_first(10, 100, 61), longest_first(70, 100, 61), longest_first(5, 6, 61)
    ((10, 51), (30, 31), (5, 6))
    """
    if query + doc <= budget:
        return query, doc
    short, long = sorted((query, doc))
    long_keep = short if short > budget else max(short, budget - short)
    short_keep = short
    if short_keep + long_keep > budget:
        short_keep = budget // 2
        long_keep = short_keep + budget % 2
    if query <= doc:  # the query is the "first" (shorter or equal) sequence
        return min(query, short_keep), min(doc, long_keep)
    return min(query, long_keep), min(doc, short_keep)


__all__ = ["TextMeasure", "longest_first"]
