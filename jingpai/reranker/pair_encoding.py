"""``(query, document)`` pairs → padded input tensors of a Hugging Face model (:class:`PairEncoder`).

Two ways in, one result: from text (:meth:`PairEncoder.encode`, what ``featurize`` does), or from token ids
a caller already has (:meth:`PairEncoder.join` of each side's encoding). The rerank service measures every
text with the tokenizer before it batches, so it joins those encodings instead of tokenizing twice.
Both end in :meth:`PairEncoder.tensors`, so the model sees the same tensors either way.

For BERT's WordPiece tokenizers (:class:`~jingpai.reranker.wordpiece.WordPieceIds`) text goes in without the
Rust tokenizer's per-token objects: each side's ids come from array lookups (a document's only as far as the
cut can reach), the cut is :func:`longest_first` on whole arrays, and the pair template is replayed on
ids for the whole batch at once (:meth:`PairEncoder.pack`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from jingpai.reranker.base import Pair
from jingpai.reranker.featurize import TextIds, require_read, rust_ids
from jingpai.reranker.wordpiece import WordPieceIds

logger = logging.getLogger(__name__)


class JoinedPair:
    """A pair's token ids built by :meth:`PairEncoder.join` (what :meth:`PairEncoder.tensors` reads of an ``Encoding``)."""

    __slots__ = ("attention_mask", "ids", "type_ids")

    def __init__(self, ids: np.ndarray, type_ids: np.ndarray) -> None:
        self.ids = ids
        self.type_ids = type_ids
        self.attention_mask = np.ones(len(ids), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.ids)


class CutPair:
    """A pair as two side reads and how many tokens of each the longest-first cut keeps (:meth:`PairEncoder.join` of
    :class:`~jingpai.reranker.featurize.TextIds`): nothing is copied per pair; :meth:`PairEncoder.tensors` lays a
    batch of them into the pair template at once (:meth:`joined`: one pair's :class:`JoinedPair`)."""

    __slots__ = ("d_keep", "document", "length", "q_keep", "query", "template")

    def __init__(self, query: TextIds, document: TextIds, q_keep: int, d_keep: int, template: _Template) -> None:
        self.query, self.document, self.q_keep, self.d_keep, self.template = query, document, q_keep, d_keep, template
        self.length = q_keep + d_keep + template.added

    def __len__(self) -> int:
        return self.length

    def joined(self) -> JoinedPair:
        return self.template.join(self.query.ids[: self.q_keep], self.document.ids[: self.d_keep])


@dataclass(frozen=True, eq=False)
class _Template:
    """A tokenizer's pair template as token ids: ``pre`` query ``mid`` document ``post``, with type ids."""

    pre: tuple[np.ndarray, np.ndarray]
    mid: tuple[np.ndarray, np.ndarray]
    post: tuple[np.ndarray, np.ndarray]
    query_type: int
    document_type: int

    @functools.cached_property
    def added(self) -> int:
        return sum(len(ids) for ids, _ in (self.pre, self.mid, self.post))

    @functools.cached_property
    def signature(self) -> tuple[Any, ...]:
        """The template as plain values (two tokenizers' copies of one template have the same)."""
        return (*(tuple(a.tolist()) for part in (self.pre, self.mid, self.post) for a in part), self.query_type, self.document_type)

    def join(self, query: Sequence[int], document: Sequence[int]) -> JoinedPair:
        ids = np.concatenate([self.pre[0], np.asarray(query, dtype=np.int64), self.mid[0], np.asarray(document, dtype=np.int64), self.post[0]])
        types = np.concatenate([self.pre[1], np.full(len(query), self.query_type, dtype=np.int64), self.mid[1],
                                np.full(len(document), self.document_type, dtype=np.int64), self.post[1]])
        return JoinedPair(ids, types)

    def pack(self, queries: Sequence[Any], documents: Sequence[Any], q_keep: np.ndarray, d_keep: np.ndarray,
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Flat ids and type ids of ``pre q[:q_keep] mid d[:d_keep] post`` for every row, and each row's length
        (one concatenation and one ``repeat``: no per-token Python)."""
        pre, mid, post = (part[0] for part in (self.pre, self.mid, self.post))
        pieces: list[Any] = []
        for q, d, qk, dk in zip(queries, documents, q_keep.tolist(), d_keep.tolist(), strict=True):
            pieces += (pre, q[:qk], mid, d[:dk], post)
        ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
        # type ids: one segment per template token, one for each side's tokens
        seg_types = np.concatenate([self.pre[1], [self.query_type], self.mid[1], [self.document_type], self.post[1]]).astype(np.int64)
        n_pre, n_mid, n_post = len(pre), len(mid), len(post)
        seg_lens = np.ones((len(q_keep), len(seg_types)), dtype=np.int64)
        seg_lens[:, n_pre] = q_keep
        seg_lens[:, n_pre + 1 + n_mid] = d_keep
        types = np.repeat(np.tile(seg_types, len(q_keep)), seg_lens.ravel())
        return ids.astype(np.int64, copy=False), types, q_keep + d_keep + (n_pre + n_mid + n_post)

    @classmethod
    def learn(cls, backend: Any) -> _Template | None:
        """The template ``backend`` wraps a two-token pair in (``None``: not of that shape; then
        :meth:`PairEncoder.join` calls the tokenizer's ``post_process`` for every pair)."""
        pieces = [backend.encode(text, add_special_tokens=False) for text in ("a b", "c d")]
        if any(len(p) == 0 for p in pieces):
            logger.info("the tokenizer encodes a probe text to nothing: pairs are joined by its post_process")
            return None
        enc = backend.post_process(*pieces, add_special_tokens=True)
        ids, types = np.asarray(enc.ids, dtype=np.int64), np.asarray(enc.type_ids, dtype=np.int64)
        # the two texts' tokens are the non-special ones (sequence_ids leave the first text's out)
        kept = [i for i, special in enumerate(enc.special_tokens_mask) if not special]
        q_at, d_at = kept[: len(pieces[0])], kept[len(pieces[0]) :]

        def whole(at: list[int], piece: Any) -> bool:  # the piece, unchanged, in one run of one type id
            return bool(at) and at == list(range(at[0], at[0] + len(piece))) and ids[at].tolist() == piece.ids and len(set(types[at].tolist())) == 1

        if not (whole(q_at, pieces[0]) and whole(d_at, pieces[1]) and q_at[-1] < d_at[0]):
            logger.info("the tokenizer's pair template is not 'specials, query, specials, document, specials': "
                        "pairs are joined by its post_process")
            return None
        cut = (slice(0, q_at[0]), slice(q_at[-1] + 1, d_at[0]), slice(d_at[-1] + 1, len(ids)))
        pre, mid, post = ((ids[c].copy(), types[c].copy()) for c in cut)
        return cls(pre, mid, post, int(types[q_at[0]]), int(types[d_at[0]]))


class PairEncoder:
    """``(query, document)`` pairs → padded input tensors, exactly as the tokenizer's own call makes them.

    ``tokenizer(queries, docs, padding=True, truncation="longest_first", max_length=…, return_tensors="pt")``
    spends as long converting each token to Python objects as the Rust tokenizer spends tokenizing; this
    calls the Rust tokenizer (its own copy, so one instance per thread) in batch and builds the tensors
    with numpy. Slow (Python) tokenizers, and fast ones that pad or cut on the left, go through the
    tokenizer's own call, as do those without a pad token (:attr:`fast` is then ``False`` and only :meth:`__call__` works).

    Args:
        tokenizer: a ``transformers`` tokenizer.

    Example:
        >>> enc = PairEncoder(tokenizer)                                       # doctest: +SKIP
        >>> enc([("中国GDP", "影响中国GDP的因素")], max_length=128)["input_ids"].shape  # doctest: +SKIP
        torch.Size([1, 14])
    """

    _FIELDS = {"input_ids": "ids", "token_type_ids": "type_ids", "attention_mask": "attention_mask"}

    def __init__(self, tokenizer: Any) -> None:
        self.source = tokenizer
        self._backend: Any = None
        self._max_length: int | None = None
        self._template: _Template | None | bool = False  # False: not learned yet
        self._wp: WordPieceIds | None = None
        self._single: tuple[np.ndarray, np.ndarray] | None | bool = False  # False: not learned yet
        if (getattr(tokenizer, "is_fast", False) and tokenizer.padding_side == "right" and tokenizer.truncation_side == "right"
                and tokenizer.pad_token_id is not None):
            from tokenizers import Tokenizer

            self._backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
            # padded here with numpy (tensors()): encodings joined one at a time must pad like a batch
            self._backend.no_padding()
            self._names = [n for n in tokenizer.model_input_names if n in self._FIELDS]
            self._pad = {"ids": tokenizer.pad_token_id, "type_ids": tokenizer.pad_token_type_id, "attention_mask": 0}
            self._wp = WordPieceIds.create(tokenizer)
        else:
            logger.info("tokenizer %s is not a right-padding fast tokenizer with a pad token: pairs go through its own call",
                        type(tokenizer).__name__)

    @property
    def templated(self) -> bool:
        """Whether :meth:`join` replays the pair template on token ids (else it calls ``post_process``)."""
        return self.fast and self._learned_template() is not None

    @property
    def fast(self) -> bool:
        """Whether pairs are encoded by the Rust tokenizer (:meth:`encode`, :meth:`join`, :meth:`tensors` work)."""
        return self._backend is not None

    def __call__(self, pairs: Sequence[Pair], *, max_length: int) -> dict[str, torch.Tensor]:
        if self._backend is None:
            enc = self.source([q for q, _ in pairs], [d for _, d in pairs], padding=True, truncation="longest_first",
                              max_length=max_length, return_tensors="pt")
            return dict(enc)
        cut = self.cut_sides(pairs, max_length=max_length)
        if cut is None:
            return self.tensors(self.encode(pairs, max_length=max_length))
        return self.packed_tensors(*cut)

    @property
    def reads_ids(self) -> bool:
        """Whether text is read by array lookups (:class:`~jingpai.reranker.wordpiece.WordPieceIds`), not the Rust tokenizer."""
        return self._wp is not None and self.templated

    def side_ids(self, texts: Sequence[str], *, cap: int | Sequence[int], offsets: bool = False) -> list[TextIds]:
        """Each text's first ``cap`` ids (no special tokens; ``cap``: one for all, or one per text), by array lookups
        where :attr:`reads_ids`.

        Raises:
            TypeError: the tokenizer cannot encode a text (a lone surrogate).
        """
        if self._wp is not None:
            return require_read(self._wp.encode(texts, cap=cap, offsets=offsets), texts)
        if isinstance(cap, int):
            return require_read(rust_ids(self._truncating(1 << 30), texts, cap=cap, offsets=offsets), texts)
        backend = self._truncating(1 << 30)
        return require_read([rust_ids(backend, [t], cap=int(c), offsets=offsets)[0] for t, c in zip(texts, cap, strict=True)], texts)

    def cut_sides(self, pairs: Sequence[Pair], *, max_length: int, offsets: bool = False,
                  ) -> tuple[list[TextIds], list[TextIds], np.ndarray, np.ndarray] | None:
        """``(query ids, document ids, query tokens kept, document tokens kept)`` per pair: each side read once
        (a query shared by pairs once), a document only as far as the cut can reach, the cut longest-first as the
        tokenizer makes it. ``None``: no fast reader or no learned template (use :meth:`encode`)."""
        template = self._learned_template() if self._wp is not None else None
        if template is None or max_length <= template.added:
            return None
        budget = max_length - template.added
        distinct = list(dict.fromkeys(q for q, _ in pairs))
        # one read of the queries (whole) and the documents: past ``budget`` tokens, or its query's length (at most its
        # characters), a document's length changes nothing longest-first keeps of either side
        caps = [1 << 30] * len(distinct) + [max(budget, len(q) + 1) for q, _ in pairs]
        reads = self.side_ids([*distinct, *(d for _, d in pairs)], cap=caps, offsets=offsets)
        q_read = dict(zip(distinct, reads[: len(distinct)], strict=True))
        queries = [q_read[q] for q, _ in pairs]
        docs = reads[len(distinct) :]
        q_len = np.fromiter((e.tokens for e in queries), dtype=np.int64, count=len(pairs))
        d_len = np.fromiter((e.tokens for e in docs), dtype=np.int64, count=len(pairs))
        q_keep, d_keep = longest_first_arrays(q_len, d_len, budget)
        return queries, docs, q_keep, d_keep

    def packed_tensors(self, queries: Sequence[TextIds], docs: Sequence[TextIds], q_keep: np.ndarray, d_keep: np.ndarray,
                       ) -> dict[str, torch.Tensor]:
        """Input tensors of the pairs :meth:`cut_sides` cut (what :meth:`tensors` makes of their encodings)."""
        template = self._learned_template()
        assert template is not None
        ids, types, lengths = template.pack([e.ids for e in queries], [e.ids for e in docs], q_keep, d_keep)
        return self._padded({"ids": ids, "type_ids": types}, lengths)

    def single_tensors(self, texts: Sequence[str], *, max_length: int) -> dict[str, torch.Tensor] | None:
        """``input_ids`` / ``attention_mask`` of single texts as ``tokenizer(texts, padding=True, truncation=True,
        max_length=max_length)`` makes them, by array lookups; ``None`` where that path is not available (no
        WordPiece reader, or a single-text template other than specials, text, specials)."""
        if self._wp is None:
            return None
        if self._single is False:
            self._single = _single_template(self._truncating(1 << 20))
        if self._single is None or max_length <= sum(len(p) for p in self._single):
            return None
        pre, post = self._single
        reads = self.side_ids(texts, cap=max_length - len(pre) - len(post))
        ids = np.concatenate([part for r in reads for part in (pre, r.ids, post)]) if reads else np.zeros(0, dtype=np.int64)
        lengths = np.fromiter((len(r.ids) + len(pre) + len(post) for r in reads), dtype=np.int64, count=len(reads))
        width = int(lengths.max(initial=0))
        inside = np.arange(width)[None, :] < lengths[:, None]
        values = np.full((len(reads), width), self._pad["ids"], dtype=np.int64)
        values[inside] = ids
        return {"input_ids": torch.from_numpy(values), "attention_mask": torch.from_numpy(inside.astype(np.int64))}

    def encode(self, pairs: Sequence[Pair], *, max_length: int) -> list[Any]:
        """Rust ``Encoding`` per pair: special tokens added, cut longest-first to ``max_length``, not padded
        (the tokenizer's own pair encoding: what the array path of :meth:`__call__` is pinned against)."""
        return self._truncating(max_length).encode_batch_fast([(q, d) for q, d in pairs])

    def join(self, query: Any, document: Any, *, max_length: int, query_tokens: int | None = None,
             document_tokens: int | None = None) -> Any:
        """The pair's encoding from each side's own (``add_special_tokens=False``) encoding: what
        :meth:`encode` makes of the two texts, without tokenizing them again. ``query_tokens`` /
        ``document_tokens``: only that many first tokens of the encoding are the text's (the encoding of a
        longer prefix; ``Encoding.truncate`` would cost more than tokenizing them).

        The tokenizer encodes each side of a pair alone, then cuts them longest-first and wraps them in its
        pair template (``Tokenizer.post_process``). Those two steps are replayed here on token ids
        (:class:`JoinedPair`): ``post_process`` itself copies every token's string, offsets and the cut-off
        rest, which cost 80 µs a pair, as long as a forward pass of a small model on a GPU.
        """
        q_len = len(query) if query_tokens is None else min(query_tokens, len(query))
        d_len = len(document) if document_tokens is None else min(document_tokens, len(document))
        template = self._learned_template()
        if template is None or max_length <= template.added:
            for encoding, tokens in ((query, q_len), (document, d_len)):
                if tokens < len(encoding):
                    encoding.truncate(tokens)
            return self._truncating(max_length).post_process(query, document, add_special_tokens=True)
        q_keep, d_keep = longest_first(q_len, d_len, max_length - template.added)
        if isinstance(query, TextIds) and isinstance(document, TextIds):
            return CutPair(query, document, q_keep, d_keep, template)  # laid out with its batch (tensors)
        return template.join(query.ids[:q_keep], document.ids[:d_keep])

    def tensors(self, encodings: Sequence[Any]) -> dict[str, torch.Tensor]:
        """Input tensors of pair encodings (from :meth:`encode` or :meth:`join`), right-padded to the longest."""
        self._fast_only()
        template = self._learned_template()
        if encodings and template is not None and all(type(e) is CutPair and (e.template is template or e.template.signature == template.signature)
                                                      for e in encodings):
            # a batch of cut reads (the service's measured pairs): one concatenation, as predict's packed_tensors
            q_keep = np.fromiter((e.q_keep for e in encodings), dtype=np.int64, count=len(encodings))
            d_keep = np.fromiter((e.d_keep for e in encodings), dtype=np.int64, count=len(encodings))
            ids, types, lengths = template.pack([e.query.ids for e in encodings], [e.document.ids for e in encodings], q_keep, d_keep)
            return self._padded({"ids": ids, "type_ids": types}, lengths)
        encodings = [e.joined() if type(e) is CutPair else e for e in encodings]
        lengths = np.fromiter((len(e) for e in encodings), dtype=np.int64, count=len(encodings))
        flat = {field: np.concatenate([np.asarray(getattr(e, field), dtype=np.int64) for e in encodings]) if len(encodings)
                else np.zeros(0, dtype=np.int64) for field in ("ids", "type_ids")}
        return self._padded(flat, lengths)

    def _padded(self, flat: dict[str, np.ndarray], lengths: np.ndarray) -> dict[str, torch.Tensor]:
        """Rows of ``lengths`` tokens (``flat``: every row's values, concatenated) right-padded to the longest.
        Unpadded encodings have an all-ones attention mask, so the mask is the rows' extent."""
        width = int(lengths.max(initial=0))
        inside = np.arange(width)[None, :] < lengths[:, None]
        out: dict[str, torch.Tensor] = {}
        for name in self._names:
            field = self._FIELDS[name]
            if field == "attention_mask":
                out[name] = torch.from_numpy(inside.astype(np.int64))
                continue
            array = np.full((len(lengths), width), self._pad[field], dtype=np.int64)
            array[inside] = flat[field]
            out[name] = torch.from_numpy(array)
        return out

    def _learned_template(self) -> _Template | None:
        if self._template is False:
            self._template = _Template.learn(self._truncating(1 << 20))  # no cut: the probe pair whole
        return self._template

    def _fast_only(self) -> None:
        if self._backend is None:
            raise TypeError(f"tokenizer {type(self.source).__name__} is not a right-padding fast tokenizer with a pad token; "
                            "call the encoder on text")

    def _truncating(self, max_length: int) -> Any:
        self._fast_only()
        if max_length != self._max_length:
            self._backend.enable_truncation(max_length, strategy="longest_first")
            self._max_length = max_length
        return self._backend


def _single_template(backend: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``(pre, post)`` special-token ids the tokenizer wraps one text in (``None``: not of that shape)."""
    piece = backend.encode("a b", add_special_tokens=False)
    if len(piece) == 0:
        return None
    enc = backend.post_process(piece, None, add_special_tokens=True)
    ids = np.asarray(enc.ids, dtype=np.int64)
    kept = [i for i, special in enumerate(enc.special_tokens_mask) if not special]
    if kept != list(range(kept[0], kept[0] + len(piece))) if kept else True:
        return None
    if ids[kept].tolist() != piece.ids:
        return None
    return ids[: kept[0]].copy(), ids[kept[-1] + 1 :].copy()


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


def longest_first_arrays(query: np.ndarray, doc: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`longest_first` of every pair at once (``int64`` arrays of token counts).

    >>> q, d = longest_first_arrays(np.array([10, 70, 5]), np.array([100, 100, 6]), 61)
    >>> q.tolist(), d.tolist()
    ([10, 30, 5], [51, 31, 6])
    """
    short = np.minimum(query, doc)
    long_keep = np.where(short > budget, short, np.maximum(short, budget - short))
    short_keep = short.copy()
    halves = short_keep + long_keep > budget
    short_keep = np.where(halves, budget // 2, short_keep)
    long_keep = np.where(halves, budget // 2 + budget % 2, long_keep)
    fits = query + doc <= budget
    q_first = query <= doc
    q_keep = np.where(fits, query, np.where(q_first, np.minimum(query, short_keep), np.minimum(query, long_keep)))
    d_keep = np.where(fits, doc, np.where(q_first, np.minimum(doc, long_keep), np.minimum(doc, short_keep)))
    return q_keep.astype(np.int64), d_keep.astype(np.int64)


__all__ = ["CutPair", "JoinedPair", "PairEncoder", "longest_first", "longest_first_arrays"]
