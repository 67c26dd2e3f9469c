"""Inputs of ``bertca`` (:mod:`jingpai.reranker.models.bertca`): each side on its own (``encoding=separate``) or the
pair read together and split back into its sides (``encoding=joint``).

Both come from array lookups where the tokenizer is BERT's WordPiece
(:meth:`~jingpai.reranker.pair_encoding.PairEncoder.single_tensors`, :func:`~jingpai.reranker.packed_pairs.pack_pairs`),
and from the tokenizer's own call otherwise; tests pin the two against each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from jingpai.reranker.base import Pair
from jingpai.reranker.packed_pairs import pack_pairs, pair_encoder


class BertCAInputs:
    """:meth:`featurize` of :class:`~jingpai.reranker.models.bertca.BertCAReranker` (needs ``tokenizer`` and ``config``)."""

    tokenizer: Any
    config: Any

    def _tokenize(self, texts: Sequence[str], max_length: int, prefix: str) -> dict[str, torch.Tensor]:
        fast = pair_encoder(self).single_tensors(texts, max_length=max_length)
        if fast is not None:
            return {f"{prefix}_input_ids": fast["input_ids"], f"{prefix}_attention_mask": fast["attention_mask"]}
        enc = self.tokenizer(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        return {f"{prefix}_input_ids": enc["input_ids"], f"{prefix}_attention_mask": enc["attention_mask"]}

    def featurize(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        if self.config.encoding == "joint":
            return self._featurize_joint(pairs)
        return {
            **self._tokenize([q for q, _ in pairs], self.config.query_max_length, "query"),
            **self._tokenize([d for _, d in pairs], self.config.max_length, "doc"),
        }

    def _featurize_joint(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        packed = pack_pairs(pair_encoder(self), pairs, max_length=self.config.query_max_length + self.config.max_length)
        if packed is None:
            return self._featurize_joint_by_tokenizer(pairs)
        lengths, first_doc = packed.lengths, packed.first_doc
        # the query side ends where the first document token is (the last real token for an empty document)
        first_doc = np.where(packed.d_keep > 0, first_doc, lengths - 1)
        batch = {k: packed.tensors[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in packed.tensors}
        return {**batch, **side_positions(first_doc, lengths - first_doc, first_doc)}

    def _featurize_joint_by_tokenizer(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        enc = self.tokenizer([q for q, _ in pairs], [d for _, d in pairs], padding=True, truncation="longest_first",
                             max_length=self.config.query_max_length + self.config.max_length, return_tensors="pt")
        batch = {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc}
        return {**batch, **joint_sides(enc["attention_mask"], [enc.sequence_ids(i) for i in range(len(pairs))])}


def joint_sides(attention_mask: torch.Tensor, sequence_ids: list[list[int | None]]) -> dict[str, torch.Tensor]:
    """Where the query and the document sit in jointly encoded pairs ``[CLS] q [SEP] d [SEP]`` (right padding).

    ``sequence_ids`` are the tokenizer's per row (0 query, 1 document, ``None`` special). The query side keeps
    [CLS] and the [SEP] after it, the document side its closing [SEP] (an empty document: only that), as the
    separate encodings each keep their own special tokens. Returns ``query_index``/``query_mask`` and
    ``doc_index``/``doc_mask``: each side's positions, left-aligned and zero-padded, for ``gather``.

    >>> sides = joint_sides(torch.tensor([[1, 1, 1, 1, 1, 0]]), [[None, 0, None, 1, None, None]])
    >>> sides["query_index"].tolist(), sides["doc_index"].tolist(), sides["doc_mask"].tolist()
    ([[0, 1, 2]], [[3, 4]], [[1, 1]])
    """
    rows: dict[str, list[list[int]]] = {"query": [], "doc": []}
    for real, sequence in zip(attention_mask.bool(), sequence_ids, strict=True):
        positions = real.nonzero().flatten().tolist()
        first_doc = next((j for j in positions if sequence[j] == 1), positions[-1])
        rows["query"].append([j for j in positions if j < first_doc])
        rows["doc"].append([j for j in positions if j >= first_doc])
    out = {}
    for name, side in rows.items():
        width = max(len(r) for r in side)
        out[f"{name}_index"] = torch.tensor([r + [0] * (width - len(r)) for r in side])
        out[f"{name}_mask"] = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in side])
    return out


def side_positions(query_tokens: np.ndarray, doc_tokens: np.ndarray, doc_start: np.ndarray) -> dict[str, torch.Tensor]:
    """:func:`joint_sides` from each row's side sizes: the query side is positions ``0 … query_tokens - 1``, the
    document side ``doc_start …`` for ``doc_tokens`` positions (array operations, no per-row Python).

    >>> sides = side_positions(np.array([3]), np.array([2]), np.array([3]))
    >>> sides["query_index"].tolist(), sides["doc_index"].tolist(), sides["doc_mask"].tolist()
    ([[0, 1, 2]], [[3, 4]], [[1, 1]])
    """
    out = {}
    for name, count, start in (("query", query_tokens, np.zeros_like(query_tokens)), ("doc", doc_tokens, doc_start)):
        width = int(count.max(initial=0))
        steps = np.arange(width)[None, :]
        inside = steps < count[:, None]
        out[f"{name}_index"] = torch.from_numpy(np.where(inside, start[:, None] + steps, 0).astype(np.int64))
        out[f"{name}_mask"] = torch.from_numpy(inside.astype(np.int64))
    return out


__all__ = ["BertCAInputs", "joint_sides", "side_positions"]
