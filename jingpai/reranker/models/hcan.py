"""HCAN — Hybrid Co-Attention Network (Rao et al., EMNLP 2019; papers/hcan-hybrid-co-attention.txt).

Word-level, no pretrained transformer. Query and document words are embedded and run through one
*shared* encoder — ``deep`` (stacked CNNs, kernel ``k``), ``wide`` (parallel CNNs, kernels
``k … k+N-1``) or ``bilstm`` (stacked BiLSTMs). At the embedding layer and after every encoder layer two
matchers run:

* **relevance matching** (no parameters): ``S = U_q U_cᵀ``, softmax over the document axis, max-pooled
  per query position and weighted by that query phrase's IDF (computed from the training corpus and
  saved with the vocabulary): unigram IDF at the embedding layer, the IDF of the k-gram a CNN position
  covers at deeper layers (bigram IDF, averaged over the phrase's adjacent pairs for longer phrases);
  the BiLSTM encoder keeps unigram weights; ``rm_similarity=cosine`` (not the paper's) replaces ``S`` by scaled
  cosines (one learned scale), so that an exact match dominates the softmax as the paper assumes;
* **semantic matching**: BiDAF-style co-attention ``A = w_qᵀU_q ⊕ w_cᵀU_c ⊕ U_q W_b U_cᵀ``,
  column softmax over the query axis, ``Ũ_q = Aᵀ U_q`` (one query summary per *document* position —
  the transpose the reference Keras code gets wrong), ``Ũ_c`` = document summary weighted by
  ``softmax_j(max_i A_ij)`` tiled over positions, ``H = [U_c; Ũ_q; U_c⊙Ũ_q; Ũ_c⊙Ũ_q]`` → BiLSTM →
  last hidden states.

All layers' features are concatenated → 2-layer MLP → softmax over 2 classes; the score is P(relevant).

Deviation from the paper, on purpose: the paper mean-pools the *softmax-normalised* similarity rows,
which always equals ``1/m`` (a row of a softmax sums to one), so that feature carries no matching
signal. We mean-pool the raw similarities over the real document positions instead.

Example:
    >>> texts = [t for pair in train_pairs for t in pair]                      # doctest: +SKIP
    >>> model = HcanReranker.build(texts, HcanConfig(encoder="deep"))           # doctest: +SKIP
    >>> model.predict([("花呗怎么还款", "花呗还款方式")])                           # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from jingpai.reranker.base import Pair
from jingpai.reranker.losses import in_window_loss
from jingpai.reranker.masking import masked_max, masked_mean, masked_softmax
from jingpai.reranker.word_reranker import WordReranker, WordRerankerConfig
from jingpai.reranker.wordvocab import UNK_ID, pad_ids

logger = logging.getLogger(__name__)

Encoder = Literal["deep", "wide", "bilstm"]
ENCODERS: tuple[str, ...] = ("deep", "wide", "bilstm")
RmSimilarity = Literal["dot", "cosine"]
RM_SIMILARITIES: tuple[str, ...] = ("dot", "cosine")


@dataclass(frozen=True)
class HcanConfig(WordRerankerConfig):
    """HCAN options (paper defaults in brackets: 300-d word2vec, N=4, k=2, F∈{128,256,512}, d=150).

    Attributes:
        encoder: ``deep`` | ``wide`` | ``bilstm``.
        num_layers: encoder layers N (matching also runs on the embedding layer, so N+1 feature blocks).
        kernel_size: CNN window k (``wide`` uses k … k+N-1).
        filters: CNN filters / BiLSTM output size F (even for ``bilstm``).
        hidden: BiLSTM size d per direction in semantic matching.
        mlp_hidden: hidden units of the final 2-layer MLP.
        dropout: dropout before the MLP.
        use_relevance, use_semantic: ablations RM-only / SM-only (paper Table 2).
        oov_buckets: words outside the training vocabulary get one of this many extra embedding rows, chosen by a
            stable hash of the word, so the same unknown word in query and document matches itself and two
            different ones (almost always) do not; ``0``: every unknown word is ``[UNK]`` (how models saved before
            the option were built), which makes any two unknown words an exact match — at the largest IDF weight.
        rm_similarity: relevance matching's ``S``: ``dot`` (the paper's ``U_q U_cᵀ``) or ``cosine`` — cosine times a
            learned scale (started at ``rm_scale``), so a word matching itself scores exactly the largest value and,
            at a scale of 10, takes almost all of the softmax over the document, which the paper assumes ("an exact
            match will dominate"); with 100-d vectors of norm ≈ 0.9 the dot product leaves that softmax nearly flat.
        rm_scale: the cosine scale's start value (``cosine`` only).
        rm_sum: also give the MLP each layer's relevance features summed over the query (two numbers a layer) — the
            IDF-weighted overlap itself, which per-position features make the MLP rebuild from few questions.
        listwise_weight: weight of the in-window loss (:func:`~jingpai.reranker.losses.in_window_loss`) on the
            relevance logit margin, next to the pair cross-entropy: the pairs of a batch with the same query words
            form that query's window (train with ``--batching queries``).
    """

    encoder: Encoder = "deep"
    num_layers: int = 4
    kernel_size: int = 2
    filters: int = 128
    hidden: int = 150
    mlp_hidden: int = 128
    dropout: float = 0.1
    use_relevance: bool = True
    use_semantic: bool = True
    oov_buckets: int = 0
    rm_similarity: RmSimilarity = "dot"
    rm_scale: float = 10.0
    rm_sum: bool = False
    listwise_weight: float = 0.0

    def __post_init__(self) -> None:
        if self.listwise_weight < 0:
            raise ValueError(f"HcanConfig.listwise_weight={self.listwise_weight}; expected 0 (off) or a positive weight")
        if self.rm_similarity not in RM_SIMILARITIES:
            raise ValueError(f"HcanConfig.rm_similarity={self.rm_similarity!r}; expected one of {', '.join(RM_SIMILARITIES)}")
        if self.rm_scale <= 0:
            raise ValueError(f"HcanConfig.rm_scale={self.rm_scale}; expected a positive start value for the cosine scale")
        if self.oov_buckets < 0:
            raise ValueError(f"HcanConfig.oov_buckets={self.oov_buckets}; expected 0 (off) or a positive bucket count")
        if self.encoder not in ENCODERS:
            raise ValueError(f"HcanConfig.encoder={self.encoder!r}; expected one of {', '.join(ENCODERS)}")
        if self.num_layers < 1 or self.kernel_size < 1:
            raise ValueError(f"HcanConfig needs num_layers >= 1 and kernel_size >= 1, got {self.num_layers}, {self.kernel_size}")
        if self.encoder == "bilstm" and self.filters % 2:
            raise ValueError(f"HcanConfig.filters={self.filters} must be even for the bilstm encoder (two directions)")
        if not (self.use_relevance or self.use_semantic):
            raise ValueError("HcanConfig: at least one of use_relevance / use_semantic must be true")


def phrase_windows(config: HcanConfig) -> list[int]:
    """Words covered by one position of each matched layer (embedding layer first)."""
    n, k = config.num_layers, config.kernel_size
    if config.encoder == "deep":
        # each stacked right-padded conv widens the window by k-1
        return [1 + h * (k - 1) for h in range(n + 1)]
    if config.encoder == "wide":
        return [1] + [k + h for h in range(n)]
    return [1] * (n + 1)


def _lengths(mask: torch.Tensor) -> torch.Tensor:
    # pack_padded_sequence needs >= 1; an empty text runs over one all-zero (masked) position
    return mask.sum(1).clamp_min(1).cpu()


class CoAttention(nn.Module):
    """BiDAF-style co-attention of one layer → a ``2·hidden`` semantic matching vector."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w_q = nn.Linear(dim, 1, bias=False)
        self.w_c = nn.Linear(dim, 1, bias=False)
        self.w_b = nn.Parameter(torch.empty(dim, dim))
        nn.init.xavier_uniform_(self.w_b)
        self.lstm = nn.LSTM(4 * dim, hidden, batch_first=True, bidirectional=True)

    def attention(self, uq: torch.Tensor, uc: torch.Tensor) -> torch.Tensor:
        """Raw co-attention logits ``A`` of shape ``[B, n, m]`` (query × document)."""
        return self.w_q(uq) + self.w_c(uc).transpose(1, 2) + (uq @ self.w_b) @ uc.transpose(1, 2)

    def forward(self, uq: torch.Tensor, q_mask: torch.Tensor, uc: torch.Tensor, c_mask: torch.Tensor) -> torch.Tensor:
        logits = self.attention(uq, uc)
        # column-wise softmax: for each document position j, a distribution over the query words
        att = masked_softmax(logits, q_mask[:, :, None], dim=1)
        uq_tilde = att.transpose(1, 2) @ uq  # [B, m, F]: Aᵀ U_q, one query summary per document position
        b = masked_softmax(masked_max(logits, q_mask[:, :, None], dim=1), c_mask, dim=1)  # [B, m]
        uc_tilde = (b.unsqueeze(-1) * uc).sum(1, keepdim=True).expand_as(uc)
        h = torch.cat([uc, uq_tilde, uc * uq_tilde, uc_tilde * uq_tilde], dim=-1)
        packed = pack_padded_sequence(h, _lengths(c_mask), batch_first=True, enforce_sorted=False)
        _, (h_n, _) = self.lstm(packed)
        return torch.cat([h_n[0], h_n[1]], dim=-1)


def relevance_matching(
    uq: torch.Tensor,
    q_mask: torch.Tensor,
    uc: torch.Tensor,
    c_mask: torch.Tensor,
    weights: torch.Tensor,
    *,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """IDF-weighted max/mean-pooled soft term matching of one layer → ``[B, 2n]``.

    Args:
        uq, uc: query ``[B, n, F]`` and document ``[B, m, F]`` representations.
        q_mask, c_mask: real (non-padding) positions.
        weights: ``[B, n]`` IDF of each query phrase (0 at padding).
        scale: ``None``: dot products (the paper); else cosine similarities, multiplied by ``scale`` before the softmax.
    """
    if scale is not None:
        # eps keeps all-zero padding rows at similarity 0 instead of NaN
        uq, uc = nn.functional.normalize(uq, dim=-1, eps=1e-6), nn.functional.normalize(uc, dim=-1, eps=1e-6)
    sim = uq @ uc.transpose(1, 2)  # [B, n, m]
    norm = masked_softmax(sim if scale is None else sim * scale, c_mask[:, None, :], dim=-1)
    max_pool = masked_max(norm, c_mask[:, None, :], dim=-1)
    mean_pool = masked_mean(sim.transpose(1, 2), c_mask, dim=1)  # raw similarities, see module doc
    w = weights * q_mask
    return torch.cat([w * max_pool, w * mean_pool], dim=-1)


class HcanNet(nn.Module):
    """The HCAN network; inputs are the tensors :meth:`HcanReranker.featurize` builds."""

    def __init__(self, config: HcanConfig, embeddings: torch.Tensor) -> None:
        super().__init__()
        self.config = config
        vocab_size, emb_dim = embeddings.shape
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=0)
        self.embedding.weight.data.copy_(embeddings)
        f, n, k = config.filters, config.num_layers, config.kernel_size
        if config.encoder == "deep":
            self.encoders = nn.ModuleList(nn.Conv1d(emb_dim if h == 0 else f, f, k) for h in range(n))
            self.pads = [k - 1] * n
        elif config.encoder == "wide":
            self.encoders = nn.ModuleList(nn.Conv1d(emb_dim, f, k + h) for h in range(n))
            self.pads = [k + h - 1 for h in range(n)]
        else:
            self.encoders = nn.ModuleList(
                nn.LSTM(emb_dim if h == 0 else f, f // 2, batch_first=True, bidirectional=True) for h in range(n)
            )
            self.pads = [0] * n
        dims = [emb_dim] + [f] * n
        # learned in log space so it stays positive
        self.rm_log_scale = nn.Parameter(torch.tensor(math.log(config.rm_scale))) if config.rm_similarity == "cosine" else None
        self.coattention = nn.ModuleList(CoAttention(d, config.hidden) for d in dims) if config.use_semantic else None
        features = 0
        if config.use_relevance:
            features += len(dims) * 2 * (config.max_query_words + int(config.rm_sum))
        if config.use_semantic:
            features += len(dims) * 2 * config.hidden
        self.mlp = nn.Sequential(
            nn.Dropout(config.dropout),
            nn.Linear(features, config.mlp_hidden),
            nn.ReLU(),
            nn.Linear(config.mlp_hidden, 2),
        )

    def encode(self, ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        """Representations of every matched layer (embeddings first), zero at padding."""
        m = mask.unsqueeze(-1).to(self.embedding.weight.dtype)
        x = self.embedding(ids) * m
        layers = [x]
        for h, enc in enumerate(self.encoders):
            # wide: parallel CNNs over the embeddings; deep / bilstm: stacked on the previous layer
            inp = layers[0] if self.config.encoder == "wide" else x
            if isinstance(enc, nn.LSTM):
                packed = pack_padded_sequence(inp, _lengths(mask), batch_first=True, enforce_sorted=False)
                out, _ = enc(packed)
                out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=ids.shape[1])
            else:
                # right padding: position i covers words i … i+k-1, never a word before it
                out = enc(nn.functional.pad(inp.transpose(1, 2), (0, self.pads[h]))).transpose(1, 2)
                out = torch.tanh(out)
            x = out * m
            layers.append(x)
        return layers

    def features(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Concatenated relevance/semantic matching features of all layers, ``[B, features]``."""
        q_mask, d_mask = batch["q_mask"], batch["d_mask"]
        q_layers = self.encode(batch["q_ids"], q_mask)
        d_layers = self.encode(batch["d_ids"], d_mask)
        rm, sm = [], []
        scale = None if self.rm_log_scale is None else self.rm_log_scale.exp()
        for layer, (uq, uc) in enumerate(zip(q_layers, d_layers, strict=True)):
            if self.config.use_relevance:
                rm.append(relevance_matching(uq, q_mask, uc, d_mask, batch["q_idf"][:, layer], scale=scale))
                if self.config.rm_sum:
                    # [B, 2n] = max-pooled ⊕ mean-pooled per query position → their two sums
                    rm.append(rm[-1].unflatten(-1, (2, -1)).sum(-1))
            if self.coattention is not None:
                sm.append(self.coattention[layer](uq, q_mask, uc, d_mask))
        return torch.cat(rm + sm, dim=-1)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Class logits ``[B, 2]``."""
        return self.mlp(self.features(batch))


class HcanReranker(WordReranker):
    """HCAN over rjieba words; build with :meth:`build` (vocabulary + IDF from the training texts).

    Example:
        >>> model = HcanReranker.build(texts, HcanConfig(encoder="wide", embedding_dim=64))  # doctest: +SKIP
        >>> model.rank("花呗怎么还款", ["花呗还款方式", "借呗额度"])                            # doctest: +SKIP
    """

    name = "hcan"
    config_class = HcanConfig
    num_labels = 2
    config: HcanConfig
    net: HcanNet

    def _build_net(self, embeddings: torch.Tensor, has_vector: torch.Tensor) -> nn.Module:
        if self.config.rm_similarity == "cosine" and not self.config.oov_buckets:
            logger.warning("hcan: rm_similarity=cosine with oov_buckets=0 — every unknown word is [UNK], so any two of them "
                           "match exactly (cosine 1); set --config oov_buckets=1000")
        if self.config.oov_buckets:
            # the bucket rows start like the vocabulary's random rows (wordvocab.embedding_matrix: N(0, 0.1))
            generator = torch.Generator().manual_seed(self.config.seed)
            buckets = torch.randn(self.config.oov_buckets, embeddings.shape[1], generator=generator) * 0.1
            embeddings = torch.cat([embeddings, buckets.to(embeddings.dtype)])
        return HcanNet(self.config, embeddings)

    def word_ids(self, words: Sequence[str]) -> list[int]:
        """Embedding rows of ``words``: vocabulary ids, unknown words in their hash bucket (``oov_buckets``)."""
        ids = self.vocab.encode(words)
        if not self.config.oov_buckets:
            return ids
        first = len(self.vocab)
        return [first + zlib.crc32(w.encode("utf-8")) % self.config.oov_buckets if i == UNK_ID and w not in self.vocab.index else i
                for w, i in zip(words, ids, strict=True)]

    def query_weights(self, words: Sequence[str]) -> np.ndarray:
        """``[layers, max_query_words]`` IDF weight of the phrase each query position covers per layer."""
        width = self.config.max_query_words
        out = np.zeros((len(phrase_windows(self.config)), width), dtype=np.float32)
        for layer, window in enumerate(phrase_windows(self.config)):
            for i in range(min(len(words), width)):
                out[layer, i] = self.vocab.phrase_idf(words[i : i + window])
        return out

    def featurize(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        queries, docs = self.tokenize_pairs(pairs)
        q_ids, q_mask = pad_ids([self.word_ids(q) for q in queries], length=self.config.max_query_words)
        d_ids, d_mask = pad_ids([self.word_ids(d) for d in docs])
        idf = np.stack([self.query_weights(q) for q in queries]) if queries else np.zeros((0, 1, 1), np.float32)
        return {
            "q_ids": torch.from_numpy(q_ids),
            "q_mask": torch.from_numpy(q_mask),
            "d_ids": torch.from_numpy(d_ids),
            "d_mask": torch.from_numpy(d_mask),
            "q_idf": torch.from_numpy(idf),
        }

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Class logits ``[B, 2]`` (index 1 = relevant)."""
        return self.net(batch)

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.softmax(self.logits(batch).float(), dim=-1)[:, 1]

    def loss(self, batch: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        """Cross entropy over {0: not relevant, 1: relevant}, plus ``listwise_weight`` × the in-window loss.

        Raises:
            ValueError: a label is not 0 or 1.
        """
        labels = labels.to(self.device).long()
        bad = labels[(labels < 0) | (labels > 1)]
        if bad.numel():
            raise ValueError(f"HCAN labels must be 0 or 1, got {sorted(set(bad.tolist()))}")
        logits = self.logits(batch).float()
        loss = nn.functional.cross_entropy(logits, labels)
        if self.config.listwise_weight > 0:
            # a pair's query is its padded word ids: equal rows are one query's window
            groups = torch.unique(batch["q_ids"].to(self.device), dim=0, return_inverse=True)[1]
            loss = loss + self.config.listwise_weight * in_window_loss(logits[:, 1] - logits[:, 0], labels.float(), groups)
        return loss


__all__ = ["HcanConfig", "HcanNet", "HcanReranker", "phrase_windows", "relevance_matching"]
