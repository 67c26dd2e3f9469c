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
expected level scaled to [0, 1], and :meth:`BertCAReranker.predict_proba` gives the class probabilities.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from jingpai.reranker.base import ModelLoadError, Pair, Reranker, RerankerConfig
from jingpai.reranker.models.cross import load_backbone, save_backbone

logger = logging.getLogger(__name__)

Decoder = Literal["dflstm", "bilstm", "mlp"]
Similarity = Literal["cosine", "bilinear", "tensor"]
DECODERS: tuple[str, ...] = ("dflstm", "bilstm", "mlp")
SIMILARITIES: tuple[str, ...] = ("cosine", "bilinear", "tensor")


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

    def __post_init__(self) -> None:
        if self.decoder not in DECODERS:
            raise ValueError(f"unknown decoder {self.decoder!r}; expected one of {', '.join(DECODERS)}")
        if self.sim not in SIMILARITIES:
            raise ValueError(f"unknown sim {self.sim!r}; expected one of {', '.join(SIMILARITIES)}")
        if self.levels < 2:
            raise ValueError(f"levels must be >= 2, got {self.levels}")
        # JSON round-trips tuples as lists; keep the frozen config hashable and comparable
        object.__setattr__(self, "mlp_hidden", tuple(self.mlp_hidden))


def masked_softmax(logits: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax over ``dim`` where ``mask`` is False gets exactly 0 weight (all-masked rows give 0)."""
    logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
    return logits.softmax(dim=dim) * mask


def co_attention(
    h: torch.Tensor, h_mask: torch.Tensor, hd: torch.Tensor, hd_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Co-attention of entity states ``h`` [B,N,l] and document states ``hd`` [B,M,l].

    Returns:
        ``(G [B,N,2l], G' [B,M,2l])``; padded positions are zero and padded keys get no weight.
    """
    affinity = hd @ h.transpose(1, 2)  # L: [B, M, N]
    pair = hd_mask.unsqueeze(2) & h_mask.unsqueeze(1)  # [B, M, N]
    attn_doc = masked_softmax(affinity, pair, dim=2)  # A'ᵀ: each doc position over entity positions
    attn_ent = masked_softmax(affinity.transpose(1, 2), pair.transpose(1, 2), dim=2)  # Aᵀ: entity over doc
    f = attn_doc @ h  # [B, M, l]
    g = attn_ent @ torch.cat([hd, f], dim=-1)  # [B, N, 2l]
    f_prime = attn_ent @ hd  # [B, N, l]
    g_prime = attn_doc @ torch.cat([h, f_prime], dim=-1)  # [B, M, 2l]
    return g * h_mask.unsqueeze(-1), g_prime * hd_mask.unsqueeze(-1)


class BiLSTM(nn.Module):
    """A packed BiLSTM: outputs at real positions never depend on padding; padded outputs are 0."""

    def __init__(self, input_size: int, hidden: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        lengths = mask.sum(1).clamp(min=1).cpu()
        packed = pack_padded_sequence(x.float(), lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return out * mask.unsqueeze(-1)


class DeepFusionLSTM(nn.Module):
    """DF-LSTMs (Liu et al. 2016): two LSTMs coupled over the grid of prefixes g_{1:i}, g'_{1:j}.

    ``h^g_{i,j}, c^g_{i,j} = LSTM([g_i ; H_{i,j}], c^g_{i-1,j})`` and
    ``h^{g'}_{i,j}, c^{g'}_{i,j} = LSTM([g'_j ; H_{i,j}], c^{g'}_{i,j-1})`` where ``H_{i,j}`` holds the
    fused states ``h = h^g ⊕ h^{g'}`` of cells (i-1,j), (i,j-1), (i-1,j-1). Cells on one anti-diagonal
    are independent, so the grid is swept diagonal by diagonal. Cell (i,j) depends only on cells with
    smaller indices, hence real cells never see padding.

    Returns per-position vectors: ``u_i = h^g_{i,M}`` (entity position i after the whole document) and
    ``v_j = h^{g'}_{N,j}`` (document position j after the whole entity), N and M the real lengths.
    """

    def __init__(self, input_size: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.cell_g = nn.Linear(input_size + 6 * hidden, 4 * hidden)
        self.cell_d = nn.Linear(input_size + 6 * hidden, 4 * hidden)

    @staticmethod
    def _step(linear: nn.Linear, x: torch.Tensor, c_prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        i, f, g, o = linear(x).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c

    def forward(
        self, g: torch.Tensor, g_mask: torch.Tensor, gd: torch.Tensor, gd_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b, n, _ = g.shape
        m = gd.shape[1]
        d = self.hidden
        g, gd = g.float(), gd.float()
        rows = torch.arange(n + 1, device=g.device)  # i = 0..N on every diagonal (i = 0 is the border)
        zeros = g.new_zeros(b, n + 1, d)
        # per diagonal k (cells (i, k-i)): h^g, c^g, h^g', c^g' as [B, N+1, d]
        prev2 = (zeros, zeros, zeros, zeros)
        prev1 = (zeros, zeros, zeros, zeros)
        out_g, out_d = [zeros, zeros], [zeros, zeros]  # diagonals 0 and 1 are all border
        g_pad = torch.cat([g.new_zeros(b, 1, g.shape[2]), g], dim=1)  # g_pad[:, i] = g_i (1-based)
        gd_pad = torch.cat([gd.new_zeros(b, 1, gd.shape[2]), gd], dim=1)
        for k in range(2, n + m + 1):
            j = k - rows
            valid = ((rows >= 1) & (j >= 1) & (j <= m)).view(1, n + 1, 1)
            jc = j.clamp(0, m)

            def up(t: torch.Tensor) -> torch.Tensor:  # value at row i-1 on a diagonal (row 0 → border)
                return torch.cat([t.new_zeros(b, 1, d), t[:, :-1]], dim=1)

            hg1, cg1, hd1, cd1 = prev1
            hg2, _, hd2, _ = prev2
            # (i-1, j) and (i, j-1) lie on diagonal k-1 at rows i-1 and i; (i-1, j-1) on k-2 at row i-1
            fused = torch.cat([up(hg1), up(hd1), hg1, hd1, up(hg2), up(hd2)], dim=-1)
            h_g, c_g = self._step(self.cell_g, torch.cat([g_pad[:, rows], fused], dim=-1), up(cg1))
            h_d, c_d = self._step(self.cell_d, torch.cat([gd_pad[:, jc], fused], dim=-1), cd1)
            cur = tuple(torch.where(valid, t, 0.0) for t in (h_g, c_g, h_d, c_d))
            out_g.append(cur[0])
            out_d.append(cur[2])
            prev2, prev1 = prev1, cur
        diag_g = torch.stack(out_g, dim=1)  # [B, N+M+1, N+1, d]; cell (i, j) at [:, i+j, i]
        diag_d = torch.stack(out_d, dim=1)
        n_real = g_mask.sum(1)  # [B]
        m_real = gd_mask.sum(1)
        batch = torch.arange(b, device=g.device).unsqueeze(1)
        i_idx = torch.arange(1, n + 1, device=g.device).unsqueeze(0)  # [1, N]
        j_idx = torch.arange(1, m + 1, device=g.device).unsqueeze(0)  # [1, M]
        u = diag_g[batch, (i_idx + m_real.unsqueeze(1)).clamp(max=n + m), i_idx]  # h^g_{i, M_b}
        v = diag_d[batch, (n_real.unsqueeze(1) + j_idx).clamp(max=n + m), n_real.unsqueeze(1).expand(-1, m)]
        return u * g_mask.unsqueeze(-1), v * gd_mask.unsqueeze(-1)


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
        layers: list[nn.Module] = []
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


class BertCAReranker(Reranker):
    """BERTCA: separately encoded query/entity and document, co-attention, fused decoding, K-max scoring.

    Args:
        config: :class:`BertCAConfig`.
        device: torch device (``None``: CUDA when available).
        assets: saved model folder to rebuild from (used by :meth:`Reranker.load`).

    Example:
        >>> model = registry.create("bertca", base="/models/chinese-bert-wwm", decoder="bilstm")  # doctest: +SKIP
        >>> encodings = model.encode_documents(["万科股权之争稍稍有些停息……"])                 # at index time
        >>> model.predict_encoded(["东阿阿胶"], encodings)                                      # at query time
    """

    name = "bertca"
    config_class = BertCAConfig
    num_labels = 3

    def __init__(self, config: BertCAConfig, *, device: str | None = None, assets: Path | None = None) -> None:
        super().__init__(config, device=device)
        self.config: BertCAConfig = config
        self.tokenizer, backbone = load_backbone(config.base, assets, architecture=self.name)
        self.net = BertCANet(backbone, config).to(self.device)

    # ------------------------------------------------------------------ tensors

    def _tokenize(self, texts: Sequence[str], max_length: int, prefix: str) -> dict[str, torch.Tensor]:
        enc = self.tokenizer(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        return {f"{prefix}_input_ids": enc["input_ids"], f"{prefix}_attention_mask": enc["attention_mask"]}

    def featurize(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        return {
            **self._tokenize([q for q, _ in pairs], self.config.query_max_length, "query"),
            **self._tokenize([d for _, d in pairs], self.config.max_length, "doc"),
        }

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.net(**batch).float()

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
        """
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
        """
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


__all__ = ["BertCAConfig", "BertCAReranker", "co_attention", "masked_softmax"]
