"""``use-tita``: TITA (:mod:`jingpai.reranker.models.tita`) on the pretrained USE-multilingual v3 backbone.

TITA's matching, topic model and memory are unchanged (stage 2 attention, GSM, memory hops, the 3-level
output); only stage 1, the encoder, is USE's (:mod:`jingpai.reranker.use_backbone`) instead of a BERT
checkpoint. Here no Chinese BERT exists, and TITA on a from-scratch BERT barely beat the majority class
(docs/results/history.md §6), while USE's pretrained token features already separate graded similarity.

* **Stage 1**: USE token features ``f`` (1280-d per SentencePiece piece, per sentence) projected to
  ``hidden``; the paper's BERT pass over ``[CLS] Q [SEP] D [SEP]`` becomes ``pair_layers`` transformer
  layers over ``[Q; D]`` (side and position embeddings), so ``e_D`` is the document contextualised by the
  query; ``e_Q`` is the query alone through the same layers (the paper's BERT(Q) with the same weights).
* **Stage 2, GSM, memory, output**: TITA's (:class:`~jingpai.reranker.models.tita.TitaNet`).
* **r1** also gets ``[u ⊙ v; |u − v|]`` of USE's own sentence vectors ``u``, ``v`` (its pretrained pooling):
  the paper's ``mean(u_D)``, ``mean(u_Q)`` pool a BERT fine-tuned end to end, which USE's token features
  are not; the sentence-pair features carry what USE learned to pool (as ``use-kw`` does).

Example:
    >>> model = UseTitaReranker.build(documents, UseTitaConfig())           # doctest: +SKIP
    >>> model.pretrain_topics(documents, epochs=5)                          # doctest: +SKIP
    >>> model.probabilities([("樱花", "玉渊潭公园是赏樱花的最佳去处")])        # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from jingpai.reranker.base import Pair, Reranker, RerankerConfig
from jingpai.reranker.models.tita import TOPIC_VOCAB_DIR, TitaConfig, TitaError, TitaNet, TitaReranker
from jingpai.reranker.use_backbone import BOS_ID, EOS_ID, OUT_DIM, TOKEN_DIM, UseEncoder, UseTokenizer
from jingpai.reranker.wordvocab import WordTokenizer, WordVocab


@dataclass(frozen=True)
class UseTitaConfig(TitaConfig):
    """:class:`~jingpai.reranker.models.tita.TitaConfig` with the USE encoder's options (``base`` and
    ``max_query_length`` are not used).

    Attributes:
        max_length: SentencePiece pieces per side (query and document each), BOS/EOS included.
        init: ``pretrained`` USE-m3 weights, or ``random`` (tests, ablations).
        freeze_embeddings: keep the 128k-piece table fixed (then it is not saved with the model).
        hidden: width of the projected token states (``d`` of stage 2 and the memory).
        heads: attention heads of the pair layers.
        pair_layers: transformer layers of stage 1 over ``[Q; D]``.
        encoder_lr_scale: learning-rate multiplier of the pretrained USE encoder (new layers get 1).
    """

    max_length: int = 64
    init: Literal["pretrained", "random"] = "pretrained"
    freeze_embeddings: bool = True
    hidden: int = 256
    heads: int = 4
    pair_layers: int = 1
    encoder_lr_scale: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.hidden % self.heads or self.pair_layers < 1 or self.max_length < 3:
            raise TitaError(f"UseTitaConfig needs hidden divisible by heads, pair_layers >= 1 and max_length >= 3, got hidden={self.hidden}, "
                            f"heads={self.heads}, pair_layers={self.pair_layers}, max_length={self.max_length}")


class UseTitaNet(TitaNet):
    """USE token features + pair layers (stage 1), then TITA's matching; returns 3-level logits."""

    def __init__(self, config: UseTitaConfig, topic_vocab_size: int) -> None:
        nn.Module.__init__(self)
        self.config = config
        h = config.hidden
        self.encoder = UseEncoder(freeze_embeddings=config.freeze_embeddings, init=config.init)
        self.token_proj = nn.Sequential(nn.Linear(TOKEN_DIM, h), nn.LayerNorm(h))
        self.side = nn.Embedding(2, h)
        self.position = nn.Embedding(config.max_length, h)
        self.pair_layers = nn.ModuleList(
            nn.TransformerEncoderLayer(h, config.heads, dim_feedforward=2 * h, dropout=config.dropout, batch_first=True, norm_first=True)
            for _ in range(config.pair_layers)
        )
        self.build_matching(config, h, topic_vocab_size, extra=2 * OUT_DIM)

    def _layers(self, x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        for layer in self.pair_layers:
            x = layer(x, src_key_padding_mask=~real)
        return x

    def encode(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q_ids, q_real, d_ids, d_real = batch["q_ids"], batch["q_real"], batch["d_ids"], batch["d_real"]
        fq, fd = self.encoder.token_features(q_ids, q_real), self.encoder.token_features(d_ids, d_real)
        u, v = self.encoder.pool(fq, q_real), self.encoder.pool(fd, d_real)
        tq = self.token_proj(fq) + self.position(torch.arange(q_ids.shape[1], device=q_ids.device)) + self.side.weight[0]
        td = self.token_proj(fd) + self.position(torch.arange(d_ids.shape[1], device=d_ids.device)) + self.side.weight[1]
        e_pair = self._layers(torch.cat([tq, td], dim=1), torch.cat([q_real, d_real], dim=1))
        e_q = self._layers(tq, q_real)
        return e_pair, e_q, torch.cat([u * v, (u - v).abs()], dim=-1)


class UseTitaReranker(TitaReranker):
    """TITA on the USE-multilingual encoder; create with :meth:`build` (topic vocabulary from documents).

    Args:
        config: model config.
        topic_vocab: bag-of-words vocabulary of the topic model (required).
        device: torch device name.

    Raises:
        TitaError: no topic vocabulary.
    """

    name = "use-tita"
    config_class = UseTitaConfig
    config: UseTitaConfig
    net: UseTitaNet

    def __init__(self, config: UseTitaConfig, *, topic_vocab: WordVocab | None = None, encoder_dir: str | Path | None = None,
                 device: str | None = None) -> None:
        if topic_vocab is None:
            raise TitaError("UseTitaReranker needs a topic vocabulary: create it with UseTitaReranker.build(documents, config) or load a saved model")
        Reranker.__init__(self, config, device=device)
        self.tokenizer = UseTokenizer(max_tokens=config.max_length)
        self.topic_vocab = topic_vocab
        self.words = WordTokenizer()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.net = UseTitaNet(config, len(topic_vocab))
        self.net.to(self.device)

    def lr_scale(self, parameter_name: str) -> float:
        """Learning-rate multiplier per parameter (see :func:`jingpai.reranker.train.train`)."""
        return self.config.encoder_lr_scale if parameter_name.startswith("encoder.") else 1.0

    def save_assets(self, directory: Path) -> None:
        self.topic_vocab.save(directory / TOPIC_VOCAB_DIR)

    @classmethod
    def from_assets(cls, config: RerankerConfig, directory: Path, *, device: str | None = None) -> UseTitaReranker:
        return cls(config, topic_vocab=WordVocab.load(directory / TOPIC_VOCAB_DIR), device=device)  # type: ignore[arg-type]

    def featurize(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        for i, pair in enumerate(pairs):
            if len(pair) != 2 or not all(isinstance(t, str) for t in pair):
                raise TypeError(f"pair {i} must be (query: str, document: str), got {pair!r}")
        queries, docs = [q for q, _ in pairs], [d for _, d in pairs]
        q_ids, q_real = self.tokenizer.batch(queries)
        d_ids, d_real = self.tokenizer.batch(docs)
        # stage 2 attends over the texts' pieces: [BOS]/[EOS] and padding excluded, as TITA's [CLS]/[SEP]
        # the pair states are [Q; D]: the document's positions follow all of the query's (padding included)
        d_mask = torch.cat([torch.zeros_like(q_real), d_real & (d_ids != BOS_ID) & (d_ids != EOS_ID)], dim=1)
        q_mask = q_real & (q_ids != BOS_ID) & (q_ids != EOS_ID)
        return {"q_ids": q_ids, "q_real": q_real, "d_ids": d_ids, "d_real": d_real, "d_mask": d_mask, "q_mask": q_mask,
                "bow": self.bag_of_words(docs)}


__all__ = ["UseTitaConfig", "UseTitaNet", "UseTitaReranker"]
