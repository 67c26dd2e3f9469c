"""Token counts and token-window cuts of texts as the model will see them (:class:`TextMeasure`).

The service measures before it batches: a pair's padded length decides its batch, a document's token
spans decide where it is cut (truncation) or split (``max-chunks``). For models that read token ids
(:attr:`~jingpai.reranker.base.Reranker.reads_pair_encodings`) the encodings measured here are also
joined into the pair's input (:meth:`TextMeasure.join`), so a text is tokenized once, not once to measure
and again to featurize.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from jingpai.cjk import HAN_CLASS
from jingpai.reranker.base import Pair, Reranker
from jingpai.reranker.pair_encoding import PairEncoder, longest_first
from jingpai.reranker.wordpiece import WordPieceIds

logger = logging.getLogger(__name__)


class TextMeasure:
    """Token counts and token-window cuts of texts, as the model will see them.

    Models with a fast Hugging Face tokenizer (``model.tokenizer``) are measured exactly; others use a
    cheap estimate (one token per CJK character, one per Latin word piece of up to 6 letters, one per
    other symbol), which only steers batching and chunking — the model still truncates on its own.

    Args:
        model: the model whose tokenizer measures.
        join: hand the measured token ids to a model that reads them (:attr:`joins`); ``False``: the model
            tokenizes the pairs' text again (what the benchmark compares against).
    """

    _UNIT = re.compile(rf"[{HAN_CLASS}]|[^\W{HAN_CLASS}]+|[^\w\s]", re.UNICODE)

    def __init__(self, model: Reranker, *, join: bool = True) -> None:
        tokenizer = getattr(model, "tokenizer", None)
        # an own copy of the Rust tokenizer, without truncation or padding: it keeps per-call state, so
        # sharing it with the worker thread's featurize() would corrupt batches. It is called directly:
        # the transformers wrapper's per-token Python conversion costs as much as tokenizing.
        self._tokenizer: Any = None
        self._wp: WordPieceIds | None = None
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
        self.max_length = int(model.config.max_length)
        # the pair template, on an own copy for this (the preparing) thread
        self._pairs: PairEncoder | None = None
        if join and self._tokenizer is not None and model.reads_pair_encodings:
            self._pairs = PairEncoder(tokenizer)
        if self._tokenizer is not None and (self._pairs is None or self._pairs.templated):
            # BERT's WordPiece: ids by array lookups (a joined encoding then needs only ids, which the template replays)
            self._wp = WordPieceIds.create(tokenizer)
        if self._pairs is not None:
            mismatch = self._join_mismatch(model)
            if mismatch is not None and self._wp is not None:
                logger.warning("model %s: ids read by array lookups differ from its featurize() (%s); the Rust tokenizer measures",
                               model.name, mismatch)
                self._wp = None
                mismatch = self._join_mismatch(model)
            if mismatch is not None:
                logger.warning("model %s: joined token ids differ from its featurize() (%s); pairs are tokenized again from text",
                               model.name, mismatch)
                self._pairs = None

    @property
    def joins(self) -> bool:
        """Whether :meth:`cut_encodings` + :meth:`join` give the model's input (token ids computed once)."""
        return self._pairs is not None

    def join(self, query: tuple[int, Any], document: tuple[int, Any]) -> Any:
        """The pair's encoding (special tokens, longest-first cut to ``max_length``) from each side's
        ``(tokens, encoding)`` of :meth:`cut_encodings`: what the model's ``pair_encodings`` makes of the two texts."""
        assert self._pairs is not None, "join() needs a model that reads pair encodings (see joins)"
        (q_tokens, q_enc), (d_tokens, d_enc) = query, document
        return self._pairs.join(q_enc, d_enc, max_length=self.max_length, query_tokens=q_tokens, document_tokens=d_tokens)

    def _join_mismatch(self, model: Reranker) -> str | None:
        """Why joined encodings of probe pairs would not be the model's own input (``None``: they are)."""
        from jingpai.reranker.service.probe import PROBE_PAIRS

        probe: list[Pair] = [*PROBE_PAIRS, ("苹果 手机", "苹果公司发布新款 iPhone 手机。" * 80), ("what is bm25 " * 80, "BM25 is a ranking function."), ("", "")]
        joined = []
        for query, doc in probe:
            # as the service cuts documents (scoring.RerankService._prepare)
            (q_len, _end, _more, q_enc), ((d_len, _end, _more, d_enc),) = self.cut_request(
                query, [doc], doc_cap=lambda q: max(self.max_length, q + 1), most=max(self.max_length, len(query) + 1))
            if q_enc is None or d_enc is None:
                return "the tokenizer refused a probe text"
            joined.append(self.join((q_len, q_enc), (d_len, d_enc)))
        ours, theirs = model.featurize_encodings(joined), model.featurize(probe)
        if ours.keys() != theirs.keys():
            return f"inputs {sorted(ours)} against {sorted(theirs)}"
        bad = [name for name in theirs if not torch.equal(ours[name], theirs[name])]
        return f"{', '.join(bad)} differ" if bad else None

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
        return [(n, end, more) for n, end, more, _enc in self.cut_encodings(texts, cap=cap)]

    def cut_encodings(self, texts: Sequence[str], *, cap: int) -> list[tuple[int, int, bool, Any]]:
        """:meth:`cuts`, each with the tokenizer's ``Encoding`` (no special tokens; ``None`` where the count is
        estimated) of a prefix of the text whose first ``tokens`` tokens are the text's, for :meth:`join`."""
        if self._tokenizer is None:
            return [(*cut, None) for cut in estimated_cuts(texts, cap=cap)]
        if self._wp is not None:
            return self._table_cuts(texts, [cap] * len(texts))

        def judge(text: str, prefix: str, enc: Any) -> tuple[int, int, bool, Any] | None:
            n = len(enc)
            if len(prefix) == len(text):
                k = min(n, cap)
            elif n > cap and enc.token_to_chars(cap)[1] <= len(prefix) - 32:
                # token ``cap`` ends well before the cut, so the first ``cap`` are as in the whole text
                k = cap
            else:
                return None
            return k, enc.token_to_chars(k - 1)[1] if k else 0, n > cap, enc

        def estimate(text: str) -> tuple[int, int, bool, Any]:
            return (*self._cut_of(*self._estimated_capped(text, cap)), None)

        # CJK text needs about one character per token; Latin text (~4 per token) takes the retry
        return self._grow(texts, cap + cap // 4 + 64, judge, estimate)

    def _table_cuts(self, texts: Sequence[str], caps: Sequence[int]) -> list[tuple[int, int, bool, Any]]:
        """:meth:`cut_encodings` by array lookups, a cap per text, in one read (only where the kept tokens end is found,
        not every token's span); a text the tokenizer refuses is estimated (the model then says what is wrong with it)."""
        assert self._wp is not None
        return [(len(e), e.end, e.more, e) if e is not None else (*self._cut_of(*self._estimated_capped(t, cap)), None)
                for t, cap, e in zip(texts, caps, self._wp.encode(texts, cap=caps, end=True), strict=True)]

    def cut_request(self, query: str, documents: Sequence[str], *, doc_cap: Callable[[int], int], most: int,
                    ) -> tuple[tuple[int, int, bool, Any], list[tuple[int, int, bool, Any]]]:
        """:meth:`cut_encodings` of a request's query (whole) and of its documents, cut to ``doc_cap(query tokens)``
        tokens, where ``most`` bounds that cap for any query: one read of all the texts where the tables read them
        (documents read to ``most`` tokens, then cut), else the query first and then its documents. A document's
        ``end`` is where its first ``most`` tokens end where it has more than the cap (a cut at least as long as the
        cap's: the model cuts the rest itself)."""
        if self._wp is None:
            (q_cut,) = self.cut_encodings([query], cap=1 << 30)
            return q_cut, self.cut_encodings(documents, cap=doc_cap(q_cut[0] + q_cut[2]))
        q_cut, *read = self._table_cuts([query, *documents], [1 << 30] + [most] * len(documents))
        cap = doc_cap(q_cut[0] + q_cut[2])
        if cap >= most:
            return q_cut, read
        # ``tokens`` counts past ``most``, so past ``cap``: the same cut as a read to ``cap``, its ids a view
        return q_cut, [(min(n, cap), end, more or n > cap, enc) for n, end, more, enc in read]

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


#: estimate classes (:func:`estimated_cuts`): a CJK character, part of a Latin word, another symbol, a space
_HAN, _WORD, _SYMBOL, _SPACE = 0, 1, 2, 3


@functools.lru_cache(maxsize=1)
def _class_patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """The CJK, Latin-word and symbol classes of :attr:`TextMeasure._UNIT`, compiled once (not looked up in ``re``'s
    cache per request: a text with a character past the BMP classifies it with them)."""
    han, word, symbol = (re.compile(p) for p in (rf"[{HAN_CLASS}]", rf"[^\W{HAN_CLASS}]", r"[^\w\s]"))
    return han, word, symbol


@functools.lru_cache(maxsize=1)
def _estimate_classes() -> np.ndarray:
    """Every BMP character's class under :attr:`TextMeasure._UNIT`'s alternatives (Python's own ``re``)."""
    han, word, symbol = _class_patterns()
    return np.array([_class_of(chr(cp), han, word, symbol) for cp in range(0x10000)], dtype=np.uint8)


def _class_of(ch: str, han: re.Pattern[str], word: re.Pattern[str], symbol: re.Pattern[str]) -> int:
    return _HAN if han.match(ch) else _WORD if word.match(ch) else _SYMBOL if symbol.match(ch) else _SPACE


def estimated_cuts(texts: Sequence[str], *, cap: int) -> list[tuple[int, int, bool]]:
    """:meth:`TextMeasure.cuts` of the estimate (one token per CJK character and per other symbol, one per 6
    letters of a Latin word) for every text at once, in array operations: what ``_estimated_capped`` +
    ``_cut_of`` make of each text, without a Python loop over its tokens.

    A long text is read as a prefix first (about 2 characters a token, 8 for ASCII text): its first ``cap``
    tokens are settled there when ``cap + 2`` tokens start in it (only the last one can be cut short);
    the texts whose prefix holds fewer are read whole."""
    want = min(cap, 1 << 24) + 1
    chars = [(8 if t[: 8 * want + 64].isascii() else 2) * want + 64 for t in texts]
    cut = [i for i, t in enumerate(texts) if len(t) > chars[i]]
    if not cut:
        return _estimated_cuts([*texts], cap=cap)
    out = _estimated_cuts([t[: chars[i]] for i, t in enumerate(texts)], cap=cap, counts=True)
    whole = [i for i in cut if out[i][3] < cap + 2]
    result = [(k, end, more) for k, end, more, _n in out]
    for i, cut_of in zip(whole, _estimated_cuts([texts[i] for i in whole], cap=cap), strict=True):
        result[i] = cut_of
    return result


def _estimated_cuts(texts: Sequence[str], *, cap: int, counts: bool = False) -> list[Any]:
    """:func:`estimated_cuts` of whole texts (with ``counts``: each with its token count too)."""
    if not texts:
        return []
    joined = " ".join(texts)
    try:
        cp = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
    except UnicodeEncodeError:  # a lone surrogate: the regex, text by text
        han, word, symbol = _class_patterns()
        out = []
        for t in texts:
            spans: list[tuple[int, int]] = []
            for m in TextMeasure._UNIT.finditer(t):
                start, end = m.span()
                spans.extend((x, min(x + 6, end)) for x in range(start, end, 6))
                if len(spans) >= cap + 1:
                    break
            k = min(len(spans), cap)
            out.append((k, spans[k - 1][1] if k else 0, len(spans) > cap, *([len(spans) + 1] if counts else [])))
        del han, word, symbol
        return out
    table = _estimate_classes()
    wide = cp >= 0x10000
    cls = table[np.where(wide, 0, cp)]
    if wide.any():
        han, word, symbol = _class_patterns()
        cls[wide] = [_class_of(chr(c), han, word, symbol) for c in cp[wide].tolist()]
    lens = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    starts = np.concatenate([[0], np.cumsum(lens + 1)[:-1]])
    is_word = cls == _WORD
    run_start = np.flatnonzero(is_word & ~np.concatenate([[False], is_word[:-1]]))
    run_end = np.flatnonzero(is_word & ~np.concatenate([is_word[1:], [False]])) + 1
    pieces = (run_end - run_start + 5) // 6
    # token spans: single characters, and each run's 6-letter pieces
    singles = np.flatnonzero((cls == _HAN) | (cls == _SYMBOL))
    piece_run = np.repeat(np.arange(len(run_start)), pieces)
    piece_start = run_start[piece_run] + 6 * (np.arange(len(piece_run)) - np.repeat(np.cumsum(pieces) - pieces, pieces))
    tok_start = np.concatenate([singles, piece_start])
    tok_end = np.concatenate([singles + 1, np.minimum(piece_start + 6, run_end[piece_run])])
    order = np.argsort(tok_start, kind="stable")
    tok_start, tok_end = tok_start[order], tok_end[order]
    bounds = np.searchsorted(tok_start, np.concatenate([starts, [len(cp) + 1]]))
    out = []
    for t in range(len(texts)):
        lo, hi = int(bounds[t]), int(bounds[t + 1])
        k = min(hi - lo, cap)
        out.append((k, int(tok_end[lo + k - 1] - starts[t]) if k else 0, hi - lo > cap, *([hi - lo] if counts else [])))
    return out


__all__ = ["TextMeasure", "estimated_cuts", "longest_first"]
