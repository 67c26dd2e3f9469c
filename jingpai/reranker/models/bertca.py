"""``bertca``: BERT + co-attention entity/document relevance (bertca-news-entity-relevance.zh.txt §4; MODEL_NOTES §2).

Pipeline, per the paper:

1. *Dynamic encoding*: the entity/query X and the document Y are encoded **separately** by the same
   BERT; each token becomes ``d_i = [E_i ; T_i]`` (input word embedding ⊕ last hidden state).
2. *Context*: two BiLSTMs with separate weights (X and Y) → ``H`` (N×l) and ``H'`` (M×l).
   Steps 1-2 of the document never see the query, so :meth:`BertCAReranker.encode_documents` can run
   at index time and :meth:`BertCAReranker.predict_encoded` scores queries against stored encodings.
3. *Co-attention* with padding masked before every softmax: ``L = H' Hᵀ``; ``A`` normalises over
   document positions, ``A'`` over entity positions; ``F = A' H``, ``G = A [H' ; F]``,
   ``F' = A H'``, ``G' = A' [H ; F']`` (batch-first form of eqs. 9-15).
4. *Decoder* (``decoder``): ``dflstm`` — Deep-Fusion LSTMs (Liu et al. 2016), two coupled LSTMs over the
   N×M grid of (G, G') prefixes, evaluated anti-diagonal by anti-diagonal; ``bilstm`` — two BiLSTMs;
   ``mlp`` — a position-wise MLP. Each yields per-position vectors U (entity) and V (document).
5. *Similarity* (``sim``) between every ``u_i`` and ``v_j``: cosine, bilinear ``uᵀMv + b`` or a tensor
   layer ``ReLU(uᵀM^{[1:c]}v + W[u;v] + b)``; K-max pooling (top K, descending, padding excluded;
   per slice for the tensor layer) → MLP (128, 32, tanh) → linear → ``levels`` logits.

Labels are ``levels`` relevance levels (3 by default: 0 none, 1 weak, 2 strong); the score is the
expected level scaled to [0, 1], and :meth:`BertCAReranker.predict_proba` gives the class probabilities. The inputs
(each side alone, or the pair together and split back) are built in :mod:`jingpai.reranker.models.bertca_inputs`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from jingpai.errors import UserError
from jingpai.reranker.base import ModelLoadError, Pair, Reranker, RerankerConfig
from jingpai.reranker.models.bertca_inputs import BertCAInputs
from jingpai.reranker.models.bertca_layers import BiLSTM, DeepFusionLSTM, PooledNorm, co_attention, masked_softmax
from jingpai.reranker.models.cross import load_backbone, save_backbone

logger = logging.getLogger(__name__)

Decoder = Literal["dflstm", "bilstm", "mlp"]
Similarity = Literal["cosine", "bilinear", "tensor"]
PooledNormKind = Literal["batch", "none"]
Encoding = Literal["separate", "joint"]
DECODERS: tuple[str, ...] = ("dflstm", "bilstm", "mlp")
SIMILARITIES: tuple[str, ...] = ("cosine", "bilinear", "tensor")
POOLED_NORMS: tuple[str, ...] = ("batch", "none")
ENCODINGS: tuple[str, ...] = ("separate", "joint")


class NotPrecomputableError(UserError, ValueError):
    """A ``bertca`` model with ``encoding=joint`` was asked for query-independent document encodings."""


@dataclass(frozen=True)
class BertCAConfig(RerankerConfig):
    """Config of :class:`BertCAReranker` (paper values as defaults).

    Attributes:
        base: local HF checkpoint folder (the paper used Chinese BERT-wwm).
        max_length: document tokens (paper: 499 characters + specials).
        query_max_length: entity/query tokens (paper: 10 characters + specials).
        context_hidden: hidden size per direction of the context BiLSTMs (paper: 320).
        decoder: ``dflstm`` | ``bilstm`` | ``mlp``.
        decoder_hidden: decoder hidden size (paper: 320).
        sim: ``cosine`` | ``bilinear`` | ``tensor``.
        tensor_slices: slices c of the tensor layer (paper: 8).
        k_max: values kept by K-max pooling (per slice).
        mlp_hidden: hidden sizes of the scoring MLP (paper: 128, 32; tanh).
        dropout: dropout in the MLP (paper: 0.15).
        levels: relevance levels (3: none / weak / strong).
        pooled_norm: ``batch``: the K-max values are standardised per feature (BatchNorm) before the tanh
            MLP; ``none``: fed as they are (how models saved before this option were trained). The pooled
            similarities are large and nearly equal across pairs (TrecQA: mean |x| 3.6, std across pairs
            0.09), so without it the first tanh layer starts saturated and a short run learns little but
            the class prior (logit spread 0.007 across pairs after one epoch).
        encoding: ``separate`` (the paper): BERT reads the query and the document apart, so the document side
            can be computed at index time (:meth:`BertCAReranker.encode_documents`); ``joint``: BERT reads
            ``[CLS] query [SEP] document [SEP]`` once (``query_max_length + max_length`` tokens in all, the
            longer side cut first) and its states are split back into the two sides before the same context,
            co-attention and scoring layers — every BERT layer then attends across the pair, as a
            cross-encoder's does, and nothing is precomputable.
    """

    max_length: int = 512
    base: str | None = None
    query_max_length: int = 12
    context_hidden: int = 320
    decoder: Decoder = "dflstm"
    decoder_hidden: int = 320
    sim: Similarity = "tensor"
    tensor_slices: int = 8
    k_max: int = 4
    mlp_hidden: tuple[int, ...] = (128, 32)
    dropout: float = 0.15
    levels: int = 3
    pooled_norm: PooledNormKind = "batch"
    encoding: Encoding = "separate"

    def __post_init__(self) -> None:
        if self.decoder not in DECODERS:
            raise ValueError(f"unknown decoder {self.decoder!r}; expected one of {', '.join(DECODERS)}")
        if self.sim not in SIMILARITIES:
            raise ValueError(f"unknown sim {self.sim!r}; expected one of {', '.join(SIMILARITIES)}")
        if self.pooled_norm not in POOLED_NORMS:
            raise ValueError(f"unknown pooled_norm {self.pooled_norm!r}; expected one of {', '.join(POOLED_NORMS)}")
        if self.encoding not in ENCODINGS:
            raise ValueError(f"unknown encoding {self.encoding!r}; expected one of {', '.join(ENCODINGS)}")
        if self.levels < 2:
            raise ValueError(f"levels must be >= 2, got {self.levels}")
        # JSON round-trips tuples as lists; keep the frozen config hashable and comparable
        object.__setattr__(self, "mlp_hidden", tuple(self.mlp_hidden))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BertCAConfig:
        # a model saved before ``pooled_norm`` existed fed the raw K-max values to its MLP: load it as it was trained
        return super().from_dict({"pooled_norm": "none", **data})  # type: ignore[return-value]


class BertCANet(nn.Module):
    """Everything after BERT's token encodings, plus BERT itself (``backbone``)."""

    def __init__(self, backbone: nn.Module, config: BertCAConfig) -> None:
        super().__init__()
        self.backbone = backbone
        self.config = config
        token_dim = 2 * backbone.config.hidden_size  # [E ; T]
        l = 2 * config.context_hidden
        self.context_query = BiLSTM(token_dim, config.context_hidden)
        self.context_doc = BiLSTM(token_dim, config.context_hidden)
        dh = config.decoder_hidden
        if config.decoder == "dflstm":
            self.decoder: nn.Module = DeepFusionLSTM(2 * l, dh)
            out_dim = dh
        elif config.decoder == "bilstm":
            self.decoder = nn.ModuleDict({"query": BiLSTM(2 * l, dh // 2 or 1), "doc": BiLSTM(2 * l, dh // 2 or 1)})
            out_dim = 2 * (dh // 2 or 1)
        else:
            self.decoder = nn.Sequential(nn.Linear(2 * l, dh), nn.Tanh())
            out_dim = dh
        if config.sim == "bilinear":
            self.bilinear = nn.Parameter(torch.empty(out_dim, out_dim))
            nn.init.xavier_uniform_(self.bilinear)
            self.bilinear_bias = nn.Parameter(torch.zeros(()))
            pooled = config.k_max
        elif config.sim == "tensor":
            self.tensor = nn.Parameter(torch.empty(config.tensor_slices, out_dim, out_dim))
            nn.init.xavier_uniform_(self.tensor)
            self.tensor_u = nn.Linear(out_dim, config.tensor_slices)
            self.tensor_v = nn.Linear(out_dim, config.tensor_slices, bias=False)
            pooled = config.k_max * config.tensor_slices
        else:
            pooled = config.k_max
        layers: list[nn.Module] = [PooledNorm(pooled)] if config.pooled_norm == "batch" else []
        width = pooled
        for size in config.mlp_hidden:
            layers += [nn.Linear(width, size), nn.Tanh(), nn.Dropout(config.dropout)]
            width = size
        self.mlp = nn.Sequential(*layers)
        self.out = nn.Linear(width, config.levels)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, side: Literal["query", "doc"]) -> torch.Tensor:
        """BERT ``[E ; T]`` token vectors → context BiLSTM states ``[B, L, l]`` (zero at padding)."""
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask)
        embedded = self.backbone.get_input_embeddings()(input_ids)
        tokens = torch.cat([embedded, out.last_hidden_state], dim=-1)
        context = self.context_query if side == "query" else self.context_doc
        return context(tokens, attention_mask.bool())

    def decode(self, g: torch.Tensor, g_mask: torch.Tensor, gd: torch.Tensor, gd_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.config.decoder == "dflstm":
            return self.decoder(g, g_mask, gd, gd_mask)
        if self.config.decoder == "bilstm":
            return self.decoder["query"](g, g_mask), self.decoder["doc"](gd, gd_mask)
        return self.decoder(g.float()) * g_mask.unsqueeze(-1), self.decoder(gd.float()) * gd_mask.unsqueeze(-1)

    def similarity(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``[B, S, N, M]`` similarity slices (S = 1, or c for the tensor layer)."""
        if self.config.sim == "cosine":
            un = nn.functional.normalize(u, dim=-1, eps=1e-8)
            vn = nn.functional.normalize(v, dim=-1, eps=1e-8)
            return (un @ vn.transpose(1, 2)).unsqueeze(1)
        if self.config.sim == "bilinear":
            return (u @ self.bilinear @ v.transpose(1, 2) + self.bilinear_bias).unsqueeze(1)
        bilinear = torch.einsum("bnd,cde,bme->bcnm", u, self.tensor, v)
        linear = self.tensor_u(u).permute(0, 2, 1).unsqueeze(3) + self.tensor_v(v).permute(0, 2, 1).unsqueeze(2)
        return torch.relu(bilinear + linear)

    def match(self, h: torch.Tensor, h_mask: torch.Tensor, hd: torch.Tensor, hd_mask: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, levels]`` from context states of query (``h``) and document (``hd``)."""
        h_mask, hd_mask = h_mask.bool(), hd_mask.bool()
        h = h.float() * h_mask.unsqueeze(-1)
        hd = hd.float() * hd_mask.unsqueeze(-1)
        g, gd = co_attention(h, h_mask, hd, hd_mask)
        u, v = self.decode(g, h_mask, gd, hd_mask)
        sims = self.similarity(u, v)  # [B, S, N, M]
        pair = (h_mask.unsqueeze(2) & hd_mask.unsqueeze(1)).unsqueeze(1)
        flat = sims.masked_fill(~pair, float("-inf")).flatten(2)
        k = min(self.config.k_max, flat.shape[-1])
        top = flat.topk(k, dim=-1).values  # descending
        top = torch.where(torch.isinf(top), torch.zeros_like(top), top)  # fewer than K real pairs
        if k < self.config.k_max:
            top = nn.functional.pad(top, (0, self.config.k_max - k))
        return self.out(self.mlp(top.flatten(1)))

    def forward_joint(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        query_index: torch.Tensor,
        query_mask: torch.Tensor,
        doc_index: torch.Tensor,
        doc_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits of pairs BERT read together; ``*_index`` pick each side's positions (``*_mask``: real ones)."""
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, **extra)
        tokens = torch.cat([self.backbone.get_input_embeddings()(input_ids), out.last_hidden_state], dim=-1)

        def side(index: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            picked = tokens.gather(1, index.unsqueeze(-1).expand(-1, -1, tokens.shape[-1]))
            return picked * mask.unsqueeze(-1).to(picked.dtype)

        h = self.context_query(side(query_index, query_mask), query_mask.bool())
        hd = self.context_doc(side(doc_index, doc_mask), doc_mask.bool())
        return self.match(h, query_mask, hd, doc_mask)

    def forward(
        self,
        query_input_ids: torch.Tensor,
        query_attention_mask: torch.Tensor,
        doc_input_ids: torch.Tensor,
        doc_attention_mask: torch.Tensor,
    ) -> torch.Tensor:
        h = self.encode(query_input_ids, query_attention_mask, side="query")
        hd = self.encode(doc_input_ids, doc_attention_mask, side="doc")
        return self.match(h, query_attention_mask, hd, doc_attention_mask)


class BertCAReranker(BertCAInputs, Reranker):
    """BERTCA: separately encoded query/entity and document, co-attention, fused decoding, K-max scoring.

    Args:
        config: :class:`BertCAConfig`.
        device: torch device (``None``: CUDA when available).
        assets: saved model folder to rebuild from (used by :meth:`Reranker.load`).

    Example:
        >>> model = registry.create("bertca", base="/models/chinese-bert-wwm", decoder="bilstm")  # doctest: +SKIP
        >>> encodings = model.encode_documents(["万科股权之争稍稍有些停息……"])  # index time  # doctest: +SKIP
        >>> model.predict_encoded(["东阿阿胶"], encodings)                       # query time  # doctest: +SKIP
    """

    name = "bertca"
    config_class = BertCAConfig
    num_labels = 3

    def __init__(self, config: BertCAConfig, *, device: str | None = None, assets: Path | None = None) -> None:
        super().__init__(config, device=device)
        self.config: BertCAConfig = config
        self.tokenizer, backbone = load_backbone(config.base, assets, architecture=self.name)
        self.net = BertCANet(backbone, config).to(self.device)

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.config.encoding == "joint":
            return self.net.forward_joint(**batch).float()
        return self.net(**batch).float()

    @property
    def precomputes_documents(self) -> bool:
        """Whether :meth:`encode_documents` works: the document side is query-independent (``encoding=separate``)."""
        return self.config.encoding == "separate"

    def _require_separate(self) -> None:
        if not self.precomputes_documents:
            raise NotPrecomputableError(
                f"this bertca model reads query and document together (encoding={self.config.encoding!r}), so no document "
                "encoding exists before its query: score pairs with predict(), or train with encoding=separate"
            )

    def _expected_level(self, logits: torch.Tensor) -> torch.Tensor:
        levels = torch.arange(self.config.levels, device=logits.device, dtype=torch.float32)
        return logits.softmax(-1) @ levels / (self.config.levels - 1)

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._expected_level(self.logits(batch))

    def loss(self, batch: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        target = labels.long()
        if not torch.equal(target.float(), labels.float()) or (target < 0).any() or (target >= self.config.levels).any():
            bad = sorted({float(x) for x in labels.flatten().tolist()})
            raise ValueError(f"bertca labels must be integer levels 0..{self.config.levels - 1}, got values {bad}")
        logits = self.logits(batch)
        return nn.functional.cross_entropy(logits, target.to(logits.device))

    @torch.inference_mode()
    def predict_proba(self, pairs: Sequence[Pair], *, batch_size: int = 32) -> np.ndarray:
        """Class probabilities ``[len(pairs), levels]`` (level 0 = irrelevant … top = strongly relevant)."""
        self.net.eval()
        out = np.empty((len(pairs), self.config.levels), dtype=np.float32)
        for start in range(0, len(pairs), batch_size):
            chunk = pairs[start : start + batch_size]
            probs = self.logits(self.to_device(self.featurize(chunk))).softmax(-1)
            out[start : start + len(chunk)] = probs.cpu().numpy()
        return out

    # ------------------------------------------------------------------ index-time documents

    @torch.inference_mode()
    def encode_documents(self, texts: Sequence[str], *, batch_size: int = 32) -> list[torch.Tensor]:
        """Query-independent document encodings (context BiLSTM states), one ``[M_i, l]`` CPU tensor per text.

        Compute these at index time and score later with :meth:`predict_encoded`.

        Raises:
            NotPrecomputableError: the model reads query and document together (``encoding=joint``).
        """
        self._require_separate()
        self.net.eval()
        out: list[torch.Tensor] = []
        for start in range(0, len(texts), batch_size):
            batch = self.to_device(self._tokenize(texts[start : start + batch_size], self.config.max_length, "doc"))
            states = self.net.encode(batch["doc_input_ids"], batch["doc_attention_mask"], side="doc")
            for row, mask in zip(states, batch["doc_attention_mask"].bool(), strict=True):
                out.append(row[mask].float().cpu())
        return out

    @torch.inference_mode()
    def predict_encoded(
        self, queries: Sequence[str], encodings: Sequence[torch.Tensor], *, batch_size: int = 32
    ) -> np.ndarray:
        """Scores of ``(queries[i], document i)`` with documents given by :meth:`encode_documents`.

        Raises:
            ValueError: the two sequences differ in length or an encoding has the wrong width.
            NotPrecomputableError: the model reads query and document together (``encoding=joint``).
        """
        self._require_separate()
        if len(queries) != len(encodings):
            raise ValueError(f"got {len(queries)} queries but {len(encodings)} document encodings; expected one per query")
        width = 2 * self.config.context_hidden
        for i, enc in enumerate(encodings):
            if enc.dim() != 2 or enc.shape[1] != width or enc.shape[0] == 0:
                raise ValueError(f"document encoding {i} has shape {tuple(enc.shape)}; expected [tokens>0, {width}]")
        self.net.eval()
        out = np.empty(len(queries), dtype=np.float32)
        for start in range(0, len(queries), batch_size):
            chunk = encodings[start : start + batch_size]
            q = self.to_device(self._tokenize(queries[start : start + batch_size], self.config.query_max_length, "query"))
            h = self.net.encode(q["query_input_ids"], q["query_attention_mask"], side="query")
            hd = nn.utils.rnn.pad_sequence([e.to(self.device) for e in chunk], batch_first=True)
            lengths = torch.tensor([e.shape[0] for e in chunk], device=self.device)
            hd_mask = torch.arange(hd.shape[1], device=self.device).unsqueeze(0) < lengths.unsqueeze(1)
            logits = self.net.match(h, q["query_attention_mask"], hd, hd_mask)
            out[start : start + len(chunk)] = self._expected_level(logits.float()).cpu().numpy()
        return out

    # ------------------------------------------------------------------ persistence

    def save_assets(self, directory: Path) -> None:
        save_backbone(directory, self.tokenizer, self.net.backbone.config)

    @classmethod
    def from_assets(cls, config: RerankerConfig, directory: Path, *, device: str | None = None) -> BertCAReranker:
        if not isinstance(config, BertCAConfig):
            raise ModelLoadError(f"{directory}: expected a BertCAConfig, got {type(config).__name__}")
        return cls(config, device=device, assets=directory)


__all__ = ["BertCAConfig", "BertCAReranker", "NotPrecomputableError", "co_attention", "masked_softmax"]
