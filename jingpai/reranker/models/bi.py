"""``bi``: a bi-encoder over any local BERT-family encoder (bge-small-zh, MiniLM, …), scoring and embedding.

Query and document are encoded separately (``[CLS] text [SEP]``), pooled as the checkpoint says (CLS or
the mean over tokens: ``1_Pooling/config.json`` of a sentence-transformers folder, else ``pooling``) and
scaled to unit length; the score is ``P(match) = σ(a·cos(u, v) + b)``, a monotone map of the cosine, so
zero-shot it ranks exactly as the encoder's own cosine (bge's model card: CLS, normalised).

Training (the generic loop of :mod:`jingpai.reranker.train`) adds, as ``use-bi`` does, binary
cross-entropy on the labelled pairs, in-batch negatives (InfoNCE over every document of the batch —
the other positives' documents and the engine-mined hard negatives in it, symmetric) and optionally the
in-window loss over pairs that share a query. Texts repeated in a batch are encoded once.

It embeds through the four methods the rerank service needs (``/embed``, ``/v1/embeddings``,
``jingpai index --vectors``): :class:`~jingpai.reranker.service.embedding.EmbeddingModel`.

Example:
    >>> model = registry.create("bi", base="bge-small-zh")                                # doctest: +SKIP
    >>> model.rank("花呗怎么还款", ["花呗如何还钱", "今天天气怎么样"], top_k=1)               # doctest: +SKIP
    >>> Reranker.load("bge-small-zh").encode(["平安银行"]).shape                           # doctest: +SKIP
    (1, 512)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from jingpai.reranker.base import ModelLoadError, Pair, Reranker, RerankerConfig
from jingpai.reranker.featurize import pad_rows, require_read
from jingpai.reranker.wordpiece import WordPieceIds
from jingpai.reranker.models.cross import load_backbone, save_backbone
from jingpai.reranker.models.use_bi import calibrated_loss, encode_texts, unique_texts

Pooling = Literal["cls", "mean"]
POOLINGS: tuple[str, ...] = ("cls", "mean")


@dataclass(frozen=True)
class BiConfig(RerankerConfig):
    """Config of :class:`BiEncoderReranker`.

    Attributes:
        base: local encoder checkpoint folder, or a catalogue name (``bge-small-zh``).
        max_length: tokens per text (query and document each), special tokens included.
        pooling: ``cls`` (bge) or ``mean`` (MiniLM sentence encoders); a sentence-transformers folder's
            own pooling wins when the model is loaded from it as it is.
        contrastive_weight: weight of the in-batch-negatives loss next to the pair loss.
        scale: inverse temperature of the in-batch softmax over cosines (bge trained at 1/0.02 = 50).
        max_label: top label value; graded labels become soft targets ``label / max_label``.
        listwise_weight: weight of the in-window loss over the pairs of a batch sharing a query.
        calibration: initial ``(a, b)`` of ``σ(a·cos + b)`` (bge's cosines sit between .3 and .95).
    """

    base: str | None = None
    max_length: int = 128
    pooling: Pooling = "cls"
    contrastive_weight: float = 1.0
    scale: float = 50.0
    max_label: float = 1.0
    listwise_weight: float = 0.0
    calibration: tuple[float, float] = (20.0, -14.0)

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {self.pooling!r}; expected one of {', '.join(POOLINGS)}")
        if self.max_length < 3:
            raise ValueError(f"max_length must be >= 3 ([CLS], one token, [SEP]), got {self.max_length}")
        object.__setattr__(self, "calibration", tuple(float(x) for x in self.calibration))


class BiNet(nn.Module):
    """The encoder plus the cosine calibration."""

    def __init__(self, encoder: nn.Module, config: BiConfig) -> None:
        super().__init__()
        self.encoder = encoder
        self.pooling = config.pooling
        self.a = nn.Parameter(torch.tensor(config.calibration[0]))
        self.b = nn.Parameter(torch.tensor(config.calibration[1]))

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **extra: torch.Tensor) -> torch.Tensor:
        """Unit vectors ``[B, H]`` of a padded batch of texts."""
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
        if self.pooling == "cls":
            pooled = states[:, 0]
        else:
            weights = attention_mask.unsqueeze(-1).to(states.dtype)
            pooled = (states * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return F.normalize(pooled.float(), dim=-1)


def st_pooling(path: Path) -> Pooling | None:
    """The pooling a sentence-transformers folder declares (``None``: it declares none).

    Raises:
        ModelLoadError: a pooling jingpai does not compute (max, weighted, last token, …).
    """
    file = path / "1_Pooling" / "config.json"
    if not file.is_file():
        return None
    conf = json.loads(file.read_text(encoding="utf-8"))
    on = sorted(k for k, v in conf.items() if k.startswith("pooling_mode_") and v is True)
    known = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean"}
    if len(on) != 1 or on[0] not in known:
        raise ModelLoadError(f"{file} sets pooling {on or '(none)'}; jingpai pools by exactly one of {sorted(known)}")
    return known[on[0]]  # type: ignore[return-value]


class BiEncoderReranker(Reranker):
    """Bi-encoder over a Hugging Face encoder; score = calibrated P(match) from the cosine."""

    name = "bi"
    config_class = BiConfig
    num_labels = 2  # scores are probabilities (accuracy threshold 0.5)

    def __init__(self, config: BiConfig, *, device: str | None = None, assets: Path | None = None) -> None:
        super().__init__(config, device=device)
        if config.max_label <= 0:
            raise ValueError(f"max_label must be > 0, got {config.max_label}")
        self.config: BiConfig = config
        self.tokenizer, encoder = load_backbone(config.base, assets, architecture=self.name)
        self.net = BiNet(encoder, config).to(self.device)
        self._takes_types = "token_type_ids" in getattr(self.tokenizer, "model_input_names", ())

    @classmethod
    def from_sentence_transformers(cls, path: Path, *, device: str | None = None) -> BiEncoderReranker:
        """A sentence-transformers bi-encoder folder (Transformer + Pooling [+ Normalize]) as it is, zero-shot."""
        pooling = st_pooling(path) or "cls"
        conf = json.loads((path / "sentence_bert_config.json").read_text()) if (path / "sentence_bert_config.json").is_file() else {}
        length = min(int(conf.get("max_seq_length") or 512), 512)
        return cls(BiConfig(base=str(path), pooling=pooling, max_length=length), device=device)

    def featurize(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        texts, q_index, d_index = unique_texts(pairs)
        batch = self.featurize_tokens([ids for ids, _ in self._token_rows(texts)])
        return {**batch, "q_index": q_index, "d_index": d_index}

    def cosines(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        inputs = {k: v for k, v in batch.items() if k not in ("q_index", "d_index")}
        vectors = self.net.embed(**inputs)
        u, v = vectors[batch["q_index"]], vectors[batch["d_index"]]
        return u, v, (u * v).sum(-1)

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        _, _, cos = self.cosines(batch)
        return torch.sigmoid(self.net.a * cos + self.net.b)

    def loss(self, batch: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        return calibrated_loss(self, batch, labels)

    # ------------------------------------------------------------------ embedding

    @property
    def embedding_dim(self) -> int:
        """Dimensions of the sentence vectors (the encoder's hidden size)."""
        return int(self.net.encoder.config.hidden_size)

    def text_tokens(
        self, texts: Sequence[str], *, max_length: int | None = None, cut: Literal["right", "left"] = "right",
    ) -> list[tuple[list[int], int]]:
        """Per text: ``[CLS] … [SEP]`` ids cut to ``max_length`` (default: the config's) from the ``cut`` side,
        and the count before the cut — one batched read of the texts."""
        return [(row.tolist(), n) for row, n in self._token_rows(texts, max_length=max_length, cut=cut, whole=True)]

    def _token_rows(
        self, texts: Sequence[str], *, max_length: int | None = None, cut: Literal["right", "left"] = "right", whole: bool = False,
    ) -> list[tuple[np.ndarray, int]]:
        """:meth:`text_tokens` as id arrays. BERT's WordPiece reads by array lookups, and without ``whole`` a
        right cut reads only as far as it keeps (the count is then exact up to the cut only)."""
        cap = max_length or self.config.max_length
        if cap < 3:
            raise ValueError(f"max_length must be >= 3 ([CLS], one token, [SEP]), got {cap}")
        cls_id, sep_id = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        wp = WordPieceIds.create(self.tokenizer)
        if wp is None:
            rows = [np.asarray(r, dtype=np.int64) for r in self.tokenizer(list(texts), add_special_tokens=False, truncation=False)["input_ids"]]
            counts = [len(r) for r in rows]
        else:
            reads = require_read(wp.encode(texts, cap=(1 << 30) if whole or cut == "left" else cap - 2), texts)
            rows, counts = [r.ids for r in reads], [r.tokens for r in reads]
        out = []
        for row, count in zip(rows, counts, strict=True):
            n = count + 2
            body = row if n <= cap else (row[: cap - 2] if cut == "right" else row[len(row) - cap + 2 :])
            out.append((np.concatenate([[cls_id], body, [sep_id]]).astype(np.int64), n))
        return out

    def featurize_tokens(self, ids: Sequence[Sequence[int]]) -> dict[str, torch.Tensor]:
        """Encoder inputs of texts given as :meth:`text_tokens` ids (padded right)."""
        pad_id = self.tokenizer.pad_token_id or 0
        values, lengths = pad_rows(ids, pad=pad_id, width=max((len(row) for row in ids), default=1))
        mask = (np.arange(values.shape[1])[None, :] < lengths[:, None]).astype(np.int64)
        batch = {"input_ids": torch.from_numpy(values), "attention_mask": torch.from_numpy(mask)}
        if self._takes_types:
            batch["token_type_ids"] = torch.zeros_like(batch["input_ids"])
        return batch

    def embeddings(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Unit sentence vectors ``[B, H]`` of a :meth:`featurize_tokens` batch already on the device."""
        return self.net.embed(**batch)

    def encode(self, texts: Sequence[str], *, batch_size: int = 32, normalize: bool = True) -> np.ndarray:
        """Sentence vectors ``float32 [N, H]`` in input order (sorted by length inside to cut padding)."""
        return encode_texts(self, texts, batch_size=batch_size, normalize=normalize)

    def save_assets(self, directory: Path) -> None:
        save_backbone(directory, self.tokenizer, self.net.encoder.config)

    @classmethod
    def from_assets(cls, config: RerankerConfig, directory: Path, *, device: str | None = None) -> Any:
        if not isinstance(config, BiConfig):
            raise ModelLoadError(f"{directory}: expected a BiConfig, got {type(config).__name__}")
        return cls(config, device=device, assets=directory)


__all__ = ["BiConfig", "BiEncoderReranker", "POOLINGS", "Pooling", "st_pooling"]
