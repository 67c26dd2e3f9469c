"""Host-side featurizing helpers shared by the rerankers: token ids of texts and batches built without per-token Python.

* :class:`TextIds` is one text's first token ids (and their character spans), as :class:`~jingpai.reranker.wordpiece.WordPieceIds`
  (BERT WordPiece by array lookups) and :func:`rust_ids` (any tokenizer, by the Rust tokenizer) read them;
* :func:`pad_rows` builds a padded batch from id arrays with one concatenation instead of a loop over rows;
* :func:`keyword_flags` marks the tokens that overlap keyword spans by a prefix sum over the text's characters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TextIds:
    """One text's first token ids (no special tokens) and where they sit in it.

    Attributes:
        ids: ``int64 [k]`` the first ``k = min(cap, tokens)`` token ids.
        tokens: the text's token count, counted up to ``cap + 1`` at least (exact where ``more`` is false).
        more: the text has more than ``cap`` tokens.
        starts, ends: ``int64 [k]`` each kept token's character span in the text (``None`` unless asked).
        stop: where the kept tokens end, where only that was asked (``end=True``: no per-token spans).
    """

    ids: np.ndarray
    tokens: int
    more: bool
    starts: np.ndarray | None = None
    ends: np.ndarray | None = None
    stop: int | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def end(self) -> int:
        """Character offset where the kept tokens end (0: none kept); needs offsets (or ``end=True``)."""
        if self.stop is not None:
            return self.stop
        assert self.ends is not None, "TextIds.end needs offsets=True or end=True"
        return int(self.ends[-1]) if len(self.ends) else 0


def _from_encoding(enc: Any, cap: int, offsets: bool) -> TextIds:
    ids = np.asarray(enc.ids, dtype=np.int64)
    n = len(ids)
    k = min(n, cap)
    if not offsets:
        return TextIds(ids[:k], n, n > cap)
    spans = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
    return TextIds(ids[:k], n, n > cap, spans[:k, 0], spans[:k, 1])


def rust_ids(backend: Any, texts: Sequence[str], *, cap: int, offsets: bool = False) -> list[TextIds | None]:
    """:meth:`~jingpai.reranker.wordpiece.WordPieceIds.encode` by the Rust tokenizer itself (any tokenizer; whole texts; ``None`` for a
    text it refuses)."""
    try:
        encodings = backend.encode_batch(list(texts), add_special_tokens=False)
    except Exception:  # noqa: BLE001 - one bad text: the others still read, the bad one is None
        if len(texts) == 1:
            return [None]
        return [rust_ids(backend, [t], cap=cap, offsets=offsets)[0] for t in texts]
    return [_from_encoding(e, cap, offsets) for e in encodings]


def require_read(reads: Sequence[TextIds | None], texts: Sequence[str]) -> list[TextIds]:
    """``reads`` with no ``None``.

    Raises:
        TypeError: the tokenizer refused a text (named by its position and start).
    """
    for i, r in enumerate(reads):
        if r is None:
            raise TypeError(f"the tokenizer cannot encode text {i} ({texts[i][:40]!r}): not a well-formed string")
    return list(reads)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- batches


def pad_rows(rows: Sequence[Any], *, pad: int | Sequence[int] = 0, width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(values int64 [B, W], lengths int64 [B])``: rows (arrays or lists of ints) right-padded to the longest
    (or ``width``) with ``pad``, in one concatenation."""
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    w = int(lengths.max(initial=0)) if width is None else width
    out = np.full((len(rows), w), pad, dtype=np.int64)
    if len(rows) and lengths.sum():
        mask = np.arange(w)[None, :] < lengths[:, None]
        out[mask] = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows])
    return out, lengths


def keyword_flags(spans: Sequence[tuple[int, int]] | np.ndarray, starts: np.ndarray, ends: np.ndarray, length: int) -> np.ndarray:
    """Per token (character span ``starts[i]:ends[i]``): whether it overlaps a keyword span (``start < e and end > s``).

    >>> keyword_flags([(0, 2), (5, 6)], np.array([0, 2, 4, 6]), np.array([1, 4, 6, 7]), 7).tolist()
    [True, False, True, False]
    """
    if not len(spans):
        return np.zeros(len(starts), dtype=bool)
    bounds = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    s, e = bounds[:, 0], bounds[:, 1]
    if (s < e).all() and (s[1:] >= e[:-1]).all():
        # sorted, disjoint, non-empty spans (keyword_spans gives these): the first span ending after a token's start
        # is the only one that can begin before its end, so the rule itself is one binary search a token
        first = np.searchsorted(e, starts, side="right")
        return (first < len(e)) & (s[np.minimum(first, len(e) - 1)] < ends)
    mark = np.zeros(length + 2, dtype=np.int64)
    np.add.at(mark, s, 1)
    np.add.at(mark, e, -1)
    # keyword characters so far: a non-empty token overlaps a (non-empty) span iff it holds a keyword character
    covered = np.concatenate([[0], np.cumsum(np.cumsum(mark)[:length] > 0)])
    out = covered[ends] - covered[starts] > 0
    empty = starts >= ends
    if empty.any():
        # an empty token at x overlaps a span iff s < x < e: x is one of the span's inner boundaries
        wide = e - s >= 2
        inner = np.zeros(length + 2, dtype=np.int64)
        np.add.at(inner, s[wide] + 1, 1)
        np.add.at(inner, e[wide], -1)
        at = np.flatnonzero(starts == ends)
        out[at] = np.cumsum(inner)[starts[at]] > 0
        for i in np.flatnonzero(starts > ends).tolist():  # a reversed span (no tokenizer makes one): the rule itself
            out[i] = any(starts[i] < e_kw and ends[i] > s_kw for s_kw, e_kw in spans)
    return out


__all__ = ["TextIds", "keyword_flags", "pad_rows", "require_read", "rust_ids"]
