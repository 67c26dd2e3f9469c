"""``use-kw``: keyword-attentive interaction on the pretrained USE-multilingual v3 backbone.

The keyword-attentive BERT paper (keyword-attentive-bert.txt §3.3; MODEL_NOTES §1) on a backbone we have
in Chinese: each side is run through the USE-m3 encoder (:mod:`jingpai.reranker.use_backbone`), whose
per-token features (piece embedding ⊕ 2/3/5-gram CNN branches, 1,280-d) are projected to ``hidden`` and
laid out as ``[CLS] A B`` with side and position embeddings. A small transformer (``layers``) runs over
the pair so every piece of A can meet every piece of B. As in ``kwbert``, the input of the last layer
also feeds one extra layer *in parallel* whose attention lets A's pieces attend only to B's keyword
pieces and B's only to A's (plus itself; a side without keywords falls back to all of its pieces), so a
swapped entity (中国 → 美国) changes what the keyword layer sees. Its outputs are average-pooled per side
into ``h_kw(A)``, ``h_kw(B)``, ``k_diff = (h_kw(A) − h_kw(B)) ⊕ (h_kw(B) − h_kw(A))``, and

    logit = MLP(h(CLS) ⊕ h_kw(A) ⊕ h_kw(B) ⊕ k_diff ⊕ u∘v ⊕ |u − v|) + a·cos(u, v) + b

with ``u``, ``v`` USE's sentence vectors; the MLP's last layer starts at zero, so the untrained model
ranks exactly like USE's cosine and training only has to learn corrections. Score = σ(logit) = P(match).
Loss: binary cross-entropy plus USE's in-batch-negatives loss on ``u``, ``v`` (``contrastive_weight``), plus,
with ``listwise_weight``, a softmax over each query's window of candidates in the batch (the engine-mined
window the model will rerank: ``jingpai negatives --strategy window``, trained with ``--batching queries``).

Keywords come from the model's :class:`~jingpai.keyword_dict.Dictionary` (saved with it) and are mapped
to SentencePiece pieces by character spans.

Example:
    >>> model = registry.create("use-kw", dictionary="dict/")                                  # doctest: +SKIP
    >>> model.predict([("哪些因素会影响中国的GDP", "哪些因素会影响美国的GDP")])                       # doctest: +SKIP
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from jingpai.reranker.base import ModelLoadError, Pair, Reranker, RerankerConfig
from jingpai.reranker.featurize import keyword_flags
from jingpai.reranker.losses import in_window_loss
from jingpai.reranker.models.cross import soft_targets
from jingpai.reranker.models.kwbert import DICTIONARY_DIR, SIDE_A, SIDE_B, SPECIAL, keyword_attention_mask, resolve_dictionary
from jingpai.reranker.models.use_bi import in_batch_loss, unique_texts
from jingpai.reranker.text_keywords import TextKeywords
from jingpai.reranker.use_backbone import OUT_DIM, TOKEN_DIM, UseEncoder, UseTokenizer, pad

if TYPE_CHECKING:
    from jingpai.keyword_dict import Dictionary

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class UseKwConfig(RerankerConfig):
    """Config of :class:`UseKeywordReranker`.

    Attributes:
        max_length: SentencePiece pieces per side (BOS/EOS included).
        init: ``pretrained`` USE-m3 weights, or ``random`` (tests, ablations).
        freeze_embeddings: keep the 128k-piece table fixed (then it is not saved with the model).
        dictionary: folder of a saved keyword dictionary (a saved model carries its own copy).
        top_k_keywords: keywords taken per side.
        hidden, layers, heads: size of the interaction transformer.
        dropout: dropout in the transformer and before the classifier.
        contrastive_weight: weight of the in-batch-negatives loss on the sentence vectors.
        scale: its inverse temperature.
        max_label: top label value; graded labels become soft targets.
        encoder_lr_scale: learning-rate multiplier of the pretrained encoder (new layers get 1).
        encoder_from: a saved ``use-bi`` or ``use-kw`` model whose (fine-tuned) encoder and cosine
            calibration a *new* model starts from, so training starts from that model's ranking; read only
            when the model is created (a saved ``use-kw`` carries the weights itself).
        freeze_encoder: keep the whole USE encoder fixed (no gradients through its CNN: ~25 % less time per
            step on a CPU); only the interaction layers and the calibration learn.
        listwise_weight: weight of the in-window loss (:func:`~jingpai.reranker.losses.in_window_loss`)
            over the pairs of a batch that share a query — train with ``--batching queries`` so a query's
            window arrives whole.
    """

    max_length: int = 64
    init: Literal["pretrained", "random"] = "pretrained"
    freeze_embeddings: bool = True
    dictionary: str | None = None
    top_k_keywords: int = 10
    hidden: int = 256
    layers: int = 2
    heads: int = 4
    dropout: float = 0.1
    contrastive_weight: float = 0.5
    scale: float = 20.0
    max_label: float = 1.0
    encoder_lr_scale: float = 0.1
    encoder_from: str | None = None
    freeze_encoder: bool = False
    listwise_weight: float = 0.0


class UseKwNet(nn.Module):
    """USE encoder + pair transformer + parallel keyword layer + classifier."""

    def __init__(self, config: UseKwConfig) -> None:
        super().__init__()
        h = config.hidden
        self.encoder = UseEncoder(freeze_embeddings=config.freeze_embeddings, init=config.init)
        self.token_proj = nn.Sequential(nn.Linear(TOKEN_DIM, h), nn.LayerNorm(h))
        self.cls = nn.Parameter(torch.zeros(1, 1, h))
        self.side_embedding = nn.Embedding(3, h)
        self.position = nn.Embedding(config.max_length, h)
        make = lambda: nn.TransformerEncoderLayer(  # noqa: E731
            h, config.heads, dim_feedforward=2 * h, dropout=config.dropout, batch_first=True, norm_first=True)
        self.layers = nn.ModuleList(make() for _ in range(config.layers))
        self.keyword_layer = copy.deepcopy(self.layers[-1])
        self.heads = config.heads
        self.dropout = nn.Dropout(config.dropout)
        self.mlp = nn.Sequential(nn.Linear(5 * h + 2 * OUT_DIM, h), nn.GELU(), nn.Linear(h, 1))
        nn.init.zeros_(self.mlp[-1].weight)
        nn.init.zeros_(self.mlp[-1].bias)
        self.a = nn.Parameter(torch.tensor(10.0))
        self.b = nn.Parameter(torch.tensor(-7.0))

    def forward(
        self, ids: torch.Tensor, mask: torch.Tensor, special: torch.Tensor, keyword: torch.Tensor,
        q_index: torch.Tensor, d_index: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logits [B], u [B, 512], v [B, 512])`` for the pairs ``(q_index[i], d_index[i])`` of the distinct texts."""
        feats = self.encoder.token_features(ids, mask)
        vectors = self.encoder.pool(feats, mask)
        tokens = self.token_proj(feats) + self.position(torch.arange(ids.shape[1], device=ids.device))
        parts, sides, kws, reals = [self.cls.expand(len(q_index), -1, -1)], [], [], []
        for index, role in ((q_index, SIDE_A), (d_index, SIDE_B)):
            real = mask[index]
            side = torch.where(real & ~special[index], role, SPECIAL)
            parts.append(tokens[index] + self.side_embedding(side))
            sides.append(side)
            kws.append(keyword[index] & real)
            reals.append(real)
        ones = mask.new_ones(len(q_index), 1)
        hidden = torch.cat(parts, dim=1)
        side = torch.cat([torch.zeros_like(ones, dtype=sides[0].dtype), *sides], dim=1)
        kw = torch.cat([torch.zeros_like(ones), *kws], dim=1)
        real = torch.cat([ones, *reals], dim=1)
        for layer in self.layers[:-1]:
            hidden = layer(hidden, src_key_padding_mask=~real)
        allowed = keyword_attention_mask(side, kw, real)
        blocked = (~allowed).repeat_interleave(self.heads, dim=0)
        kw_hidden = self.keyword_layer(hidden, src_mask=blocked)
        hidden = self.layers[-1](hidden, src_key_padding_mask=~real)
        pooled = []
        for role in (SIDE_A, SIDE_B):
            weights = (side == role).to(kw_hidden.dtype).unsqueeze(-1)
            pooled.append((kw_hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0))
        h_a, h_b = pooled
        u, v = vectors[q_index], vectors[d_index]
        features = torch.cat([hidden[:, 0], h_a, h_b, h_a - h_b, h_b - h_a, u * v, (u - v).abs()], dim=-1)
        cos = (u.float() * v.float()).sum(-1)
        logits = self.mlp(self.dropout(features)).squeeze(-1).float() + self.a * cos + self.b
        return logits, u, v


class _FlagCache:
    """Keyword flags of texts' first pieces (:meth:`UseKeywordReranker._keyword_flags`) cached per ``(text, its
    keywords, n)``: the spans of a text's first ``n`` pieces are always the same, so they need not be in the key, and
    are found only for the misses, all at once; its keywords are in the key, as they may be given later
    (``give_keywords``). Cleared whole when full."""

    def __init__(self, compute: Callable[[Sequence[str], Sequence[Sequence[str]], Sequence[tuple[np.ndarray, np.ndarray]]], list[np.ndarray | None]],
                 words: TextKeywords, *,
                 maxsize: int) -> None:
        self._compute = compute
        self._words = words
        self._maxsize = maxsize
        self._done: dict[tuple[str, tuple[str, ...], int], np.ndarray | None] = {}

    def __call__(self, texts: Sequence[str], ns: Sequence[int],
                 spans: Callable[[Sequence[int]], list[tuple[np.ndarray, np.ndarray]]]) -> list[np.ndarray | None]:
        """Each text's flags (``None``: no piece is a keyword); ``spans(indices)`` gives the misses' piece spans."""
        keys = [(text, self._words(text), n) for text, n in zip(texts, ns, strict=True)]
        out = [self._done.get(key, _MISS) for key in keys]
        # a text without keywords has no flags: its spans are not needed
        missed = [i for i, flags in enumerate(out) if flags is _MISS and keys[i][1] and ns[i]]
        out = [None if flags is _MISS else flags for flags in out]
        if len(self._done) + len(missed) > self._maxsize:
            self._done.clear()  # atomic under the GIL: another thread's miss computes again
        if missed:
            for i, flags in zip(missed, self._compute([texts[i] for i in missed], [keys[i][1] for i in missed], spans(missed)), strict=True):
                out[i] = self._done[keys[i]] = flags
        return out

    def cache_clear(self) -> None:
        self._done.clear()


_MISS = object()


class UseKeywordReranker(Reranker):
    """Keyword-attentive interaction model on USE-m3; score = P(match).

    Args:
        config: :class:`UseKwConfig`.
        device: torch device.
        assets: saved model folder (its keyword dictionary is used).
        dictionary: keyword dictionary (overrides ``config.dictionary``); without one every side falls
            back to all of its pieces (logged).
    """

    name = "use-kw"
    reads_whole_text = True  # keywords are the whole text's top k
    config_class = UseKwConfig
    num_labels = 2

    def __init__(
        self, config: UseKwConfig, *, device: str | None = None, assets: Path | None = None, dictionary: Dictionary | None = None,
    ) -> None:
        super().__init__(config, device=device)
        if config.max_label <= 0:
            raise ValueError(f"max_label must be > 0, got {config.max_label}")
        if config.hidden % config.heads:
            raise ValueError(f"hidden ({config.hidden}) must be a multiple of heads ({config.heads})")
        self.config: UseKwConfig = config
        self.tokenizer = UseTokenizer(max_tokens=config.max_length)
        self.net = UseKwNet(config).to(self.device)
        if config.encoder_from and assets is None:
            self._start_from(Path(config.encoder_from))
        self.set_dictionary(resolve_dictionary(dictionary, assets=assets, configured=config.dictionary))
        if config.freeze_encoder:
            self.net.encoder.requires_grad_(False)

    def _start_from(self, folder: Path) -> None:
        from jingpai.reranker.base import WEIGHTS_FILE

        path = folder / WEIGHTS_FILE
        if not path.is_file():
            raise ModelLoadError(f"encoder_from={str(folder)!r} is not a saved use-bi/use-kw model: {WEIGHTS_FILE} is missing")
        state = torch.load(path, map_location="cpu", weights_only=True)
        wanted = {k: v for k, v in state.items() if k.startswith("encoder.") or k in ("a", "b")}
        if not any(k.startswith("encoder.") for k in wanted):
            raise ModelLoadError(f"{path} holds no USE encoder weights (expected a use-bi or use-kw model)")
        missing = self.net.load_state_dict(wanted, strict=False)
        if missing.unexpected_keys:
            raise ModelLoadError(f"{path}: unexpected encoder weights {missing.unexpected_keys[:5]}")
        logger.info("use-kw starts from the encoder of %s", folder)

    def set_dictionary(self, dictionary: Dictionary | None) -> None:
        """Use ``dictionary`` for keywords from now on (and record its version)."""
        self.dictionary = dictionary
        self.keyword_dict_version = dictionary.version if dictionary is not None else None
        if dictionary is None:
            logger.warning("use-kw has no keyword dictionary: the keyword layer falls back to all pieces of each side")
            self._words = None
            self._flags = lambda texts, ns, spans: [None] * len(texts)
            return
        from jingpai.keyword_dict import KeywordExtractor, keyword_spans

        keywords = KeywordExtractor(dictionary, top_k=self.config.top_k_keywords)
        # training revisits every text once per epoch; a request's query is in every pair
        self._words = TextKeywords(keywords.words, top_k=self.config.top_k_keywords, version=self.keyword_dict_version, maxsize=200_000)

        # keyed by the words as well as the text: keywords given for a text (give_keywords) are never hidden by spans
        # found for other words, and a copy of the model (the service's own) may share the cache
        @lru_cache(maxsize=200_000)
        def spans_of(text: str, found: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
            return tuple(keyword_spans(text, found)) if found else ()

        self._spans_of = spans_of
        # as the spans, for what featurize reads of a text: training revisits it every epoch
        self._flags = _FlagCache(self._keyword_flags, self._words, maxsize=200_000)

    def _text_keywords(self, text: str) -> tuple[tuple[int, int], ...]:
        """The spans of the keywords of ``text`` in it (none without a dictionary)."""
        return self._spans_of(text, self._words(text)) if self._words is not None else ()

    def _keyword_mask(self, text: str) -> tuple[bool, ...]:
        """Whether each SentencePiece piece of the whole ``text`` overlaps one of its keywords."""
        spans = self._text_keywords(text)
        return tuple(any(s < e_kw and e > s_kw for s_kw, e_kw in spans) for _, s, e in self._piece_spans(text))

    def give_keywords(self, texts: Sequence[str], words: Sequence[Sequence[str] | None], *, version: str, top_k: int) -> int:
        """Known keywords of ``texts`` (an index's, ranked by dictionary ``version``): see :meth:`TextKeywords.give`."""
        return self._words.give(texts, words, version=version, top_k=top_k) if self._words is not None else 0

    @staticmethod
    def _keyword_flags(texts: Sequence[str], words: Sequence[Sequence[str]], spans: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray | None]:
        """Whether each of the first pieces of each text (character spans ``(starts, ends)``) overlaps one of its
        keywords (``None``: none does): ``keyword_mask(text)[:len(starts)]``, the keywords searched only as far as
        those pieces reach, the overlap test for all the texts at once."""
        from jingpai.keyword_dict import keyword_spans

        out: list[np.ndarray | None] = [None] * len(texts)
        # a piece ending at e overlaps only keywords starting before e (an empty one at x: before x)
        found = [keyword_spans(text, kw, before=int(ends.max())) if kw and len(starts) else []
                 for text, kw, (starts, ends) in zip(texts, words, spans, strict=True)]
        some = [i for i, f in enumerate(found) if f]
        if not some:
            return out
        # the texts laid one after another, a character apart: their sorted, disjoint keyword spans make one such
        # list, and a piece can meet only its own text's, so one binary search does every text
        shift = np.cumsum([0] + [len(texts[i]) + 1 for i in some])
        kw = np.asarray([(a + sh, b + sh) for i, sh in zip(some, shift.tolist(), strict=False) for a, b in found[i]], dtype=np.int64)
        counts = [len(spans[i][0]) for i in some]
        at = np.repeat(shift[:-1], counts)
        flags = keyword_flags(kw, np.concatenate([spans[i][0] for i in some]) + at, np.concatenate([spans[i][1] for i in some]) + at,
                              int(shift[-1]))
        bounds = np.cumsum([0, *counts]).tolist()
        hit = np.add.reduceat(flags, bounds[:-1]) > 0 if len(flags) else np.zeros(len(some), dtype=bool)
        for j, i in enumerate(some):
            if hit[j] and counts[j]:
                out[i] = flags[bounds[j] : bounds[j + 1]]
        return out

    @lru_cache(maxsize=200_000)  # noqa: B019 - the model lives as long as its cache should
    def _piece_spans(self, text: str) -> list[tuple[str, int, int]]:
        return self.tokenizer.pieces(text)

    def keywords(self, text: str) -> list[str]:
        """The pieces of ``text`` the keyword layer treats as keywords."""
        flags = self._keyword_mask(text)
        return [piece for (piece, _, _), kw in zip(self._piece_spans(text), flags, strict=True) if kw]

    def lr_scale(self, parameter_name: str) -> float:
        """Learning-rate multiplier per parameter (see :func:`jingpai.reranker.train.train`)."""
        return self.config.encoder_lr_scale if parameter_name.startswith("encoder.") else 1.0

    def featurize(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        texts, q_index, d_index = unique_texts(pairs)
        encoded, spans = self.tokenizer.encode_with_spans(texts)
        ids, mask = pad(encoded)
        lengths = mask.sum(1)
        rows = torch.arange(len(texts))
        special = torch.zeros_like(mask)
        special[rows, 0] = True  # BOS
        special[rows, (lengths - 1).clamp_min(0)] = True  # EOS
        keyword = np.zeros(tuple(mask.shape), dtype=bool)
        for i, flags in enumerate(self._flags(texts, [len(seq) - 2 for seq in encoded], spans)):
            if flags is not None:
                keyword[i, 1 : 1 + len(flags)] = flags
        return {"ids": ids, "mask": mask, "special": special, "keyword": torch.from_numpy(keyword), "q_index": q_index, "d_index": d_index}

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits, _, _ = self.net(**batch)
        return torch.sigmoid(logits)

    def loss(self, batch: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        logits, u, v = self.net(**batch)
        target = soft_targets(labels, self.config.max_label).to(logits.device)
        loss = F.binary_cross_entropy_with_logits(logits, target)
        if self.config.contrastive_weight > 0:
            loss = loss + self.config.contrastive_weight * in_batch_loss(
                u.float(), v.float(), target >= 0.5, batch["d_index"], scale=self.config.scale)
        if self.config.listwise_weight > 0:
            loss = loss + self.config.listwise_weight * in_window_loss(logits, target, batch["q_index"])
        return loss

    def save_assets(self, directory: Path) -> None:
        if self.dictionary is not None:
            self.dictionary.save(directory / DICTIONARY_DIR)

    @classmethod
    def from_assets(cls, config: RerankerConfig, directory: Path, *, device: str | None = None) -> UseKeywordReranker:
        if not isinstance(config, UseKwConfig):
            raise ModelLoadError(f"{directory}: expected a UseKwConfig, got {type(config).__name__}")
        return cls(config, device=device, assets=directory)


__all__ = ["UseKeywordReranker", "UseKwConfig"]
