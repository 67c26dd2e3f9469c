"""``use-esim``: token-by-token comparison of two questions (ESIM) over the USE-multilingual token features.

``use-bi`` compares two 512-d sentence vectors and ``use-kw`` runs a few fresh transformer layers over the
pair; on LCQMC both classify well yet barely reorder BM25's window, whose candidates differ from the query
in one or two words. ESIM (Chen et al., "Enhanced LSTM for Natural Language Inference", ACL 2017) is the
classic model for exactly that comparison: align every piece of one text with the other, compare each piece
with what it aligned to, and compose the comparisons. Here it reads USE-m3's per-piece features (piece
embedding ⊕ 2/3/5-gram CNN branches, 1,280-d; :mod:`jingpai.reranker.use_backbone`) instead of random
embeddings, and its two BiLSTMs are residual convolutions: USE's CNN branches already give each piece its
n-gram context, and an LSTM's backward pass cost 3× the rest of a step on a 2-core CPU::

    ā = Conv(P x_a),  b̄ = Conv(P x_b)                              # input encoding (``encode_layers``)
    e_ij = ā_i · b̄_j / √h;  ã = softmax_j(e) b̄,  b̃ = softmax_i(e)ᵀ ā  # soft alignment, padding masked
    m_a = GELU(F [ā; ã; ā − ã; ā ∘ ã])                              # local inference (b likewise)
    v_a = Conv(m_a)                                                  # composition (``compose_layers``)
    logit = MLP(mean(v_a) ⊕ max(v_a) ⊕ mean(v_b) ⊕ max(v_b)) + a·cos(u, v) + b

with ``u``, ``v`` USE's own sentence vectors. The MLP's last layer starts at zero, so the untrained model
ranks exactly like USE's cosine (as ``use-kw`` does) and training learns the token-level corrections.
Score = σ(logit) = P(match). Loss: binary cross-entropy, plus, with ``listwise_weight``, a softmax over each
query's window of candidates in the batch (train with ``--batching queries``).

The USE encoder is frozen by default (``freeze_encoder``): its features are then computed without
gradients, which is what makes several epochs over LCQMC + BQ train fit the 2-core CPU.

Example:
    >>> model = registry.create("use-esim")                                                         # doctest: +SKIP
    >>> model.predict([("哪些因素会影响中国的GDP", "哪些因素会影响美国的GDP")])                             # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from jingpai.reranker.base import ModelLoadError, Pair, Reranker, RerankerConfig
from jingpai.reranker.losses import in_window_loss
from jingpai.reranker.masking import masked_max, masked_mean, masked_softmax
from jingpai.reranker.models.cross import soft_targets
from jingpai.reranker.models.use_bi import encode_unique
from jingpai.reranker.use_backbone import TOKEN_DIM, UseEncoder, UseTokenizer

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class UseEsimConfig(RerankerConfig):
    """Config of :class:`UseEsimReranker`.

    Attributes:
        max_length: SentencePiece pieces per side (BOS/EOS included).
        init: ``pretrained`` USE-m3 weights, or ``random`` (tests, ablations).
        hidden: width of the projected token features and of every layer after them.
        kernel: width of the convolutions (odd).
        encode_layers: residual convolutions over each text before the alignment (USE's features already
            carry 2/3/5-gram context).
        compose_layers: residual convolutions over the local-inference features after it.
        dropout: dropout on the projected features, the local-inference features and in the classifier.
        freeze_encoder: keep the USE encoder fixed (its features are computed without gradients, and no
            backward pass runs through its CNN); ``False`` fine-tunes it at ``encoder_lr_scale`` × the
            learning rate.
        encoder_lr_scale: learning-rate multiplier of the USE encoder when it trains.
        max_label: top label value; graded labels become soft targets.
        listwise_weight: weight of the in-window loss over the pairs of a batch that share a query.
    """

    max_length: int = 48
    init: Literal["pretrained", "random"] = "pretrained"
    hidden: int = 256
    kernel: int = 3
    encode_layers: int = 1
    compose_layers: int = 2
    dropout: float = 0.1
    freeze_encoder: bool = True
    encoder_lr_scale: float = 0.1
    max_label: float = 1.0
    listwise_weight: float = 0.0


def _mean_max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``mean ⊕ max`` over the real positions of ``x [B, L, D]`` → ``[B, 2D]``."""
    return torch.cat([masked_mean(x, mask, 1), masked_max(x, mask, 1)], dim=-1)


class _ConvBlock(nn.Module):
    """Residual same-length 1-D convolution over ``[B, L, D]``, padding kept at zero before and after."""

    def __init__(self, dim: int, kernel: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(dim, dim, kernel, padding=kernel // 2)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.unsqueeze(-1).to(x.dtype)
        x = x * m
        y = F.gelu(self.conv(x.transpose(1, 2)).transpose(1, 2))
        return self.norm(x + y) * m


class EsimNet(nn.Module):
    """USE encoder → projection + conv encoding → soft alignment → local inference → conv composition → pooled MLP."""

    def __init__(self, config: UseEsimConfig) -> None:
        super().__init__()
        h = config.hidden
        self.freeze_encoder = config.freeze_encoder
        self.encoder = UseEncoder(freeze_embeddings=True, init=config.init)
        if config.freeze_encoder:
            self.encoder.requires_grad_(False)
        self.proj = nn.Sequential(nn.Linear(TOKEN_DIM, h), nn.LayerNorm(h))
        self.dropout = nn.Dropout(config.dropout)
        self.encode = nn.ModuleList(_ConvBlock(h, config.kernel) for _ in range(config.encode_layers))
        self.infer = nn.Sequential(nn.Linear(4 * h, h), nn.GELU())
        self.compose = nn.ModuleList(_ConvBlock(h, config.kernel) for _ in range(config.compose_layers))
        self.mlp = nn.Sequential(nn.Linear(4 * h, h), nn.Tanh(), nn.Dropout(config.dropout), nn.Linear(h, 1))
        nn.init.zeros_(self.mlp[-1].weight)
        nn.init.zeros_(self.mlp[-1].bias)
        self.a = nn.Parameter(torch.tensor(10.0))
        self.b = nn.Parameter(torch.tensor(-7.0))

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, q_index: torch.Tensor, d_index: torch.Tensor) -> torch.Tensor:
        """Logits ``[B]`` of the pairs ``(q_index[i], d_index[i])`` of the distinct texts ``ids [T, L]``."""
        grad = torch.no_grad() if self.freeze_encoder else contextlib.nullcontext()
        with grad:
            feats = self.encoder.token_features(ids, mask)
            vectors = self.encoder.pool(feats, mask)
        # each distinct text is encoded once; pairs then index into it
        x = self.dropout(self.proj(feats))
        for block in self.encode:
            x = block(x, mask)
        a, b = x[q_index], x[d_index]
        ma, mb = mask[q_index], mask[d_index]
        e = a @ b.transpose(1, 2) / a.shape[-1] ** 0.5  # [B, La, Lb]
        a_tilde = masked_softmax(e, mb.unsqueeze(1), -1) @ b
        b_tilde = masked_softmax(e, ma.unsqueeze(2), 1).transpose(1, 2) @ a
        pooled = []
        for side, aligned, m in ((a, a_tilde, ma), (b, b_tilde, mb)):
            local = self.dropout(self.infer(torch.cat([side, aligned, side - aligned, side * aligned], dim=-1)))
            for block in self.compose:
                local = block(local, m)
            pooled.append(_mean_max(local, m))
        u, v = vectors[q_index].float(), vectors[d_index].float()
        logits = self.mlp(self.dropout(torch.cat(pooled, dim=-1))).squeeze(-1).float()
        return logits + self.a * (u * v).sum(-1) + self.b


class UseEsimReranker(Reranker):
    """ESIM over USE-m3 token features; score = P(match).

    Args:
        config: :class:`UseEsimConfig`.
        device: torch device.
    """

    name = "use-esim"
    config_class = UseEsimConfig
    num_labels = 2

    def __init__(self, config: UseEsimConfig, *, device: str | None = None) -> None:
        super().__init__(config, device=device)
        if config.max_label <= 0:
            raise ValueError(f"max_label must be > 0, got {config.max_label}")
        if min(config.hidden, config.max_length, config.compose_layers + 1, config.encode_layers + 1) < 1:
            raise ValueError(f"hidden and max_length must be >= 1 and layer counts >= 0, got {config}")
        if config.kernel < 1 or config.kernel % 2 == 0:
            raise ValueError(f"kernel must be odd (1, 3, 5, …) so a convolution keeps the length, got {config.kernel}")
        self.config: UseEsimConfig = config
        self.tokenizer = UseTokenizer(max_tokens=config.max_length)
        self.net = EsimNet(config).to(self.device)
        self._logits = False

    def lr_scale(self, parameter_name: str) -> float:
        """Learning-rate multiplier per parameter (see :func:`jingpai.reranker.train.train`)."""
        return self.config.encoder_lr_scale if parameter_name.startswith("encoder.") else 1.0

    def featurize(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        for i, pair in enumerate(pairs):
            if len(pair) != 2 or not all(isinstance(t, str) for t in pair):
                raise TypeError(f"pair {i} must be (query: str, document: str), got {pair!r}")
        return encode_unique(self.tokenizer, pairs)

    def use_logit_scores(self) -> bool:
        """Score the logit whose sigmoid :meth:`scores` returns (see :meth:`Reranker.use_logit_scores`)."""
        self._logits = True
        self.num_labels = 1
        return True

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self.net(**batch)
        return logits if self._logits else torch.sigmoid(logits)

    def loss(self, batch: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        logits = self.net(**batch)
        target = soft_targets(labels, self.config.max_label).to(logits.device)
        loss = F.binary_cross_entropy_with_logits(logits, target)
        if self.config.listwise_weight > 0:
            loss = loss + self.config.listwise_weight * in_window_loss(logits, target, batch["q_index"])
        return loss

    @classmethod
    def from_assets(cls, config: RerankerConfig, directory: Path, *, device: str | None = None) -> UseEsimReranker:
        if not isinstance(config, UseEsimConfig):
            raise ModelLoadError(f"{directory}: expected a UseEsimConfig, got {type(config).__name__}")
        return cls(config, device=device)


__all__ = ["UseEsimConfig", "UseEsimReranker"]
