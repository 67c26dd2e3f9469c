"""IASM — interactive attention for semantic text matching (papers/iasm-interactive-attention.txt).

Word-level, like HCAN (same rjieba vocabulary helper, :mod:`jingpai.reranker.wordvocab`).

* ``A⁰_ij = cos(q_i, d_j)`` from a *frozen* copy of the initial word vectors (paper eq. 1). Words
  without a vector (``[UNK]``, or no pre-trained vector) match only by exact string: ``A⁰_ij = 1`` if
  both are such words and identical, else 0 (MODEL_NOTES §5).
* Each layer ``l`` (eqs. 4-7): ``Q^{l+1} = ReLU(A^{lᵀ} Q^l W_q^l)``, ``D^{l+1} = ReLU(A^l D^l W_d^l)``
  — the source takes the target's length and vice versa, so an *odd* layer count brings ``D^L`` back
  to the query's positions and ``Q^L`` to the document's.
* ``static``: ``A^{l+1} = A^{lᵀ}`` (eq. 3); ``dynamic``: ``A^{l+1} = α cos(Q^{l+1}, D^{l+1}) + β A^{lᵀ}``
  (eq. 2; α .75, β .25).
* Distance (eq. 8): ``γ·Dist(norm(Q⁰), norm(D^L)) + δ·Dist(norm(D⁰), norm(Q^L))`` with L2-normalised
  word vectors and Euclidean distance; lower = more relevant, so the score is its negation.
* Loss (eq. 9): hinge ``[Δ − s(q,d⁺) + s(q',d⁻)]₊`` over every (positive, negative) pair in the batch,
  negatives being the labelled ones plus ``num_negatives`` corrupted pairs per positive (its query with
  other documents of the batch, as the paper's negative sampling replaces the target text).

Padding is masked in ``A`` (rows and columns), so padded positions never pass messages.

Choices the paper leaves open, settled here: ``distance="mean"`` (default) averages the per-word
Euclidean distances over the real positions so that long documents are not penalised for their length;
``"frobenius"`` is the plain matrix Euclidean norm. ``W`` has no bias, so a zero message stays zero.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from jingpai.reranker.base import Pair
from jingpai.reranker.word_reranker import WordReranker, WordRerankerConfig
from jingpai.reranker.wordvocab import UNK_ID, pad_ids

logger = logging.getLogger(__name__)

MODES: tuple[str, ...] = ("static", "dynamic")
DISTANCES: tuple[str, ...] = ("mean", "frobenius")


@dataclass(frozen=True)
class IasmConfig(WordRerankerConfig):
    """IASM options (paper: 3 layers for PubMed/TNL, 5 for YodaQA; α .75 β .25 γ δ .5; Adam 1e-4).

    Attributes:
        mode: ``static`` | ``dynamic`` matching matrix.
        num_layers: interactive attention layers; must be odd.
        alpha, beta: weights of the new local similarity and of the previous matrix (dynamic mode).
        gamma, delta: weights of the source- and target-channel distances.
        margin: Δ of the hinge loss.
        num_negatives: corrupted pairs per positive built in-batch (its query, another pair's document).
        distance: ``mean`` (mean per-word distance) | ``frobenius`` (matrix norm).
    """

    mode: Literal["static", "dynamic"] = "dynamic"
    num_layers: int = 3
    alpha: float = 0.75
    beta: float = 0.25
    gamma: float = 0.5
    delta: float = 0.5
    margin: float = 0.1
    num_negatives: int = 4
    distance: Literal["mean", "frobenius"] = "mean"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"IasmConfig.mode={self.mode!r}; expected one of {', '.join(MODES)}")
        if self.distance not in DISTANCES:
            raise ValueError(f"IasmConfig.distance={self.distance!r}; expected one of {', '.join(DISTANCES)}")
        if self.num_layers < 1 or self.num_layers % 2 == 0:
            raise ValueError(f"IasmConfig.num_layers={self.num_layers} must be odd (1, 3, 5, …) so the final shapes align")
        if self.margin <= 0 or self.num_negatives < 0:
            raise ValueError(f"IasmConfig needs margin > 0 and num_negatives >= 0, got {self.margin}, {self.num_negatives}")


def _cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pairwise cosine ``[B, n, m]`` of rows of ``a [B, n, k]`` and ``b [B, m, k]`` (0 for zero rows)."""
    return nn.functional.normalize(a, dim=-1) @ nn.functional.normalize(b, dim=-1).transpose(1, 2)


class IasmNet(nn.Module):
    """The interactive attention network; :meth:`distance` is the paper's s(q, d)."""

    def __init__(self, config: IasmConfig, embeddings: torch.Tensor, has_vector: torch.Tensor) -> None:
        super().__init__()
        self.config = config
        vocab_size, dim = embeddings.shape
        self.embedding = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.embedding.weight.data.copy_(embeddings)
        # A⁰ comes from the initial vectors, kept frozen (saved with the weights)
        self.register_buffer("frozen", embeddings.clone())
        self.register_buffer("has_vector", has_vector.clone().bool())
        self.w_q = nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in range(config.num_layers))
        self.w_d = nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in range(config.num_layers))

    def initial_matrix(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``A⁰ [B, m, n]``: frozen-vector cosine, exact string match for words without a vector, 0 at padding."""
        q_ids, d_ids = batch["q_ids"], batch["d_ids"]
        cos = _cos(self.frozen[q_ids], self.frozen[d_ids])
        q_oov = (q_ids == UNK_ID) | ~self.has_vector[q_ids]
        d_oov = (d_ids == UNK_ID) | ~self.has_vector[d_ids]
        either = q_oov[:, :, None] | d_oov[:, None, :]
        exact = (batch["q_key"][:, :, None] == batch["d_key"][:, None, :]) & q_oov[:, :, None] & d_oov[:, None, :]
        a0 = torch.where(either, exact.to(cos.dtype), cos)
        return a0 * (batch["q_mask"][:, :, None] & batch["d_mask"][:, None, :])

    def distance(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``s(q, d)`` per pair ``[B]``; lower = more relevant."""
        cfg = self.config
        q_mask, d_mask = batch["q_mask"], batch["d_mask"]
        qm = q_mask.unsqueeze(-1).to(self.embedding.weight.dtype)
        dm = d_mask.unsqueeze(-1).to(self.embedding.weight.dtype)
        q0 = self.embedding(batch["q_ids"]) * qm
        d0 = self.embedding(batch["d_ids"]) * dm
        a = self.initial_matrix(batch).to(q0.dtype)
        q, d = q0, d0
        rows, cols = q_mask, d_mask  # rows of A follow Q's positions, columns D's
        for layer in range(cfg.num_layers):
            q_next = torch.relu(self.w_q[layer](a.transpose(1, 2) @ q))  # takes the columns' length
            d_next = torch.relu(self.w_d[layer](a @ d))  # takes the rows' length
            rows, cols = cols, rows
            pair_mask = (rows[:, :, None] & cols[:, None, :]).to(a.dtype)
            if cfg.mode == "dynamic":
                a = (cfg.alpha * _cos(q_next, d_next) + cfg.beta * a.transpose(1, 2)) * pair_mask
            else:
                a = a.transpose(1, 2)
            q, d = q_next, d_next
        # odd L: q has the document's positions, d the query's
        source = self._dist(q0, d, q_mask)
        target = self._dist(d0, q, d_mask)
        return cfg.gamma * source + cfg.delta * target

    def _dist(self, original: torch.Tensor, learned: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        diff = nn.functional.normalize(original, dim=-1) - nn.functional.normalize(learned, dim=-1)
        m = mask.to(diff.dtype)
        if self.config.distance == "frobenius":
            return ((diff.pow(2).sum(-1) * m).sum(-1) + 1e-12).sqrt()
        per_word = (diff.pow(2).sum(-1) + 1e-12).sqrt()
        return (per_word * m).sum(-1) / m.sum(-1).clamp_min(1.0)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Relevance score ``−s(q, d)`` per pair."""
        return -self.distance(batch)


class IasmReranker(WordReranker):
    """IASM-Static / IASM-Dynamic over rjieba words; build with :meth:`build`.

    Example:
        >>> model = IasmReranker.build(texts, IasmConfig(mode="dynamic", num_layers=3))  # doctest: +SKIP
        >>> model.rank("花呗怎么还款", ["花呗还款方式", "借呗额度"])                        # doctest: +SKIP
    """

    name = "iasm"
    config_class = IasmConfig
    num_labels = 1
    config: IasmConfig
    net: IasmNet

    def _build_net(self, embeddings: torch.Tensor, has_vector: torch.Tensor) -> nn.Module:
        return IasmNet(self.config, embeddings, has_vector)

    def featurize(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        queries, docs = self.tokenize_pairs(pairs)
        q_ids, q_mask = pad_ids([self.vocab.encode(q) for q in queries])
        d_ids, d_mask = pad_ids([self.vocab.encode(d) for d in docs])
        # batch-wide string ids: words without a vector match only their identical string
        keys: dict[str, int] = {}
        q_key, _ = pad_ids([[keys.setdefault(w, len(keys) + 1) for w in q] for q in queries], length=q_ids.shape[1])
        d_key, _ = pad_ids([[keys.setdefault(w, len(keys) + 1) for w in d] for d in docs], length=d_ids.shape[1])
        return {
            "q_ids": torch.from_numpy(q_ids),
            "q_mask": torch.from_numpy(q_mask),
            "q_key": torch.from_numpy(q_key),
            "d_ids": torch.from_numpy(d_ids),
            "d_mask": torch.from_numpy(d_mask),
            "d_key": torch.from_numpy(d_key),
        }

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.net(batch).float()

    def pair_loss(self, positive: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
        """Mean hinge ``[Δ − s⁺ + s⁻]₊`` over all (positive, negative) combinations (scores, higher = better)."""
        return torch.relu(self.config.margin - positive[:, None] + negative[None, :]).mean()

    def corrupted(self, batch: dict[str, torch.Tensor], rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """In-batch negatives: each query of ``rows`` paired with the documents of the next ``num_negatives`` pairs."""
        size = batch["q_ids"].shape[0]
        shifts = range(1, min(self.config.num_negatives, size - 1) + 1)
        q_rows = rows.repeat(len(shifts))
        d_rows = torch.cat([(rows + s) % size for s in shifts]) if len(shifts) else rows[:0]
        out = {k: batch[k][q_rows] for k in ("q_ids", "q_mask", "q_key")}
        out.update({k: batch[k][d_rows] for k in ("d_ids", "d_mask", "d_key")})
        return out

    def loss(self, batch: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        """Margin ranking loss (eq. 9) with labelled and in-batch corrupted negatives.

        Raises:
            ValueError: a label is not 0 or 1.
        """
        labels = labels.to(self.device)
        bad = labels[(labels != 0) & (labels != 1)]
        if bad.numel():
            raise ValueError(f"IASM labels must be 0 (negative) or 1 (positive), got {sorted(set(bad.tolist()))}")
        scores = self.scores(batch)
        pos_rows = torch.nonzero(labels == 1).flatten()
        negatives = [scores[labels == 0]]
        if self.config.num_negatives and pos_rows.numel() and scores.shape[0] > 1:
            negatives.append(self.scores(self.corrupted(batch, pos_rows)))
        negative = torch.cat(negatives)
        if not pos_rows.numel() or not negative.numel():
            logger.debug("IASM batch without a positive/negative pair; loss is 0")
            return scores.sum() * 0.0
        return self.pair_loss(scores[pos_rows], negative)


__all__ = ["IasmConfig", "IasmNet", "IasmReranker"]
