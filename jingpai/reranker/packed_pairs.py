"""Pairs cut and packed into one ``pre query mid document post`` input, with every token's place (:class:`PackedPairs`).

``kwbert`` (token roles and keyword flags) and ``bertca``'s joint encoding (where each side sits) both read a pair
batch as :meth:`~jingpai.reranker.pair_encoding.PairEncoder.cut_sides` cuts it and
:meth:`~jingpai.reranker.pair_encoding.PairEncoder.packed_tensors` lays it out, then need per-token arrays in that
layout; this module does it once for both, as array operations over the whole batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from jingpai.reranker.base import Pair
from jingpai.reranker.featurize import TextIds
from jingpai.reranker.pair_encoding import PairEncoder


@dataclass(frozen=True)
class PackedPairs:
    """A batch of pairs cut longest-first and packed as the tokenizer's pair template lays them out.

    Attributes:
        queries, docs: each pair's side reads (:class:`~jingpai.reranker.featurize.TextIds`; a shared query is one object).
        q_keep, d_keep: ``int64 [B]`` tokens kept of each side.
        tensors: the model inputs (``input_ids``, ``attention_mask``, ``token_type_ids`` where the model takes them).
        n_pre, n_mid, n_post: template tokens before the query, between the sides and after the document.
    """

    queries: list[TextIds]
    docs: list[TextIds]
    q_keep: np.ndarray
    d_keep: np.ndarray
    tensors: dict[str, torch.Tensor]
    n_pre: int
    n_mid: int
    n_post: int

    @property
    def lengths(self) -> np.ndarray:
        """``int64 [B]`` real tokens per row."""
        return self.q_keep + self.d_keep + (self.n_pre + self.n_mid + self.n_post)

    @property
    def first_doc(self) -> np.ndarray:
        """``int64 [B]`` position of each row's first document token."""
        return self.n_pre + self.q_keep + self.n_mid

    @property
    def width(self) -> int:
        return int(self.tensors["input_ids"].shape[1])

    def _inside(self) -> np.ndarray:
        return np.arange(self.width)[None, :] < self.lengths[:, None]

    def roles(self, *, template: int, query: int, doc: int) -> np.ndarray:
        """``int64 [B, W]``: ``template`` at template tokens, ``query`` / ``doc`` at each side's tokens, 0 at padding."""
        seg = np.array([template] * self.n_pre + [query] + [template] * self.n_mid + [doc] + [template] * self.n_post, dtype=np.int64)
        seg_lens = np.ones((len(self.q_keep), len(seg)), dtype=np.int64)
        seg_lens[:, self.n_pre], seg_lens[:, self.n_pre + 1 + self.n_mid] = self.q_keep, self.d_keep
        out = np.zeros((len(self.q_keep), self.width), dtype=np.int64)
        out[self._inside()] = np.repeat(np.tile(seg, len(self.q_keep)), seg_lens.ravel())
        return out

    def side_flags(self, query_flags: Sequence[np.ndarray], doc_flags: Sequence[np.ndarray]) -> np.ndarray:
        """``bool [B, W]``: each pair's per-token flags of its query and document (at least their kept tokens
        long), false at template tokens and padding."""
        pre, mid, post = (np.zeros(n, dtype=bool) for n in (self.n_pre, self.n_mid, self.n_post))
        pieces: list[np.ndarray] = []
        for q, d, qk, dk in zip(query_flags, doc_flags, self.q_keep.tolist(), self.d_keep.tolist(), strict=True):
            pieces += (pre, q[:qk], mid, d[:dk], post)
        out = np.zeros((len(self.q_keep), self.width), dtype=bool)
        out[self._inside()] = np.concatenate(pieces) if pieces else np.zeros(0, dtype=bool)
        return out


def pair_encoder(owner: Any) -> PairEncoder:
    """The :class:`~jingpai.reranker.pair_encoding.PairEncoder` of ``owner.tokenizer``, kept on ``owner`` (a new one
    when the tokenizer was replaced)."""
    encoder = getattr(owner, "_encoder", None)
    if encoder is None or encoder.source is not owner.tokenizer:
        encoder = owner._encoder = PairEncoder(owner.tokenizer)
    return encoder


def pack_pairs(encoder: PairEncoder, pairs: Sequence[Pair], *, max_length: int, offsets: bool = False) -> PackedPairs | None:
    """``pairs`` cut to ``max_length`` and packed (each side read once, by array lookups); ``None`` where the
    encoder cannot read ids or has no learned template (the caller takes the tokenizer's own pair call)."""
    cut = encoder.cut_sides(pairs, max_length=max_length, offsets=offsets) if encoder.reads_ids else None
    if cut is None:
        return None
    queries, docs, q_keep, d_keep = cut
    template = encoder._learned_template()
    assert template is not None  # cut_sides read the template
    tensors = encoder.packed_tensors(queries, docs, q_keep, d_keep)
    return PackedPairs(queries, docs, q_keep, d_keep, tensors, len(template.pre[0]), len(template.mid[0]), len(template.post[0]))


__all__ = ["PackedPairs", "pack_pairs", "pair_encoder"]
