"""``kwbert``: keyword-attentive BERT (keyword-attentive-bert.txt §3.3; MODEL_NOTES §1).

``[CLS] A [SEP] B [SEP]`` runs through BERT. The hidden states that feed BERT's last layer also feed
one extra transformer layer *in parallel* to it (same shape, initialised from the last layer's weights)
whose attention mask lets every token of A attend only to the keyword tokens of B and every token of B
only to the keyword tokens of A, plus itself (so no row is empty). A side without keywords falls back
to all of its tokens. The keyword layer's outputs are average-pooled over A's and B's tokens ([CLS] and
[SEP] excluded) into ``h_kw(A)``, ``h_kw(B)``;
``k_diff = (h_kw(A) - h_kw(B)) ⊕ (h_kw(B) - h_kw(A))``; a linear classifier over
``h(CLS) ⊕ h_kw(A) ⊕ h_kw(B) ⊕ k_diff`` gives 2 classes and the score is P(match).

Keywords are found with the model's own :class:`jingpai.keyword_dict.Dictionary` (saved with the
model; its version goes to ``keyword_dict_version``) and mapped to tokens through the tokenizer's
offset mapping and :func:`jingpai.keyword_dict.keyword_spans`.

Example:
    >>> model = registry.create("kwbert", base="/models/bert-base-chinese", dictionary="/dicts/finance")  # doctest: +SKIP
    >>> model.predict([("哪些因素会影响中国的GDP", "影响美国GDP的因素")])                                 # doctest: +SKIP
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from jingpai.reranker.base import ModelLoadError, Pair, Reranker, RerankerConfig
from jingpai.reranker.featurize import keyword_flags
from jingpai.reranker.models.cross import load_backbone, save_backbone, soft_targets
from jingpai.reranker.packed_pairs import pack_pairs, pair_encoder
from jingpai.reranker.text_keywords import TextKeywords

if TYPE_CHECKING:
    from jingpai.keyword_dict import Dictionary

logger = logging.getLogger(__name__)

#: sub-folder of a saved model holding its keyword dictionary
DICTIONARY_DIR = "keyword_dict"

#: token roles in ``batch["side"]``
SPECIAL, SIDE_A, SIDE_B = 0, 1, 2


@dataclass(frozen=True)
class KwBertConfig(RerankerConfig):
    """Config of :class:`KeywordBertReranker`.

    Attributes:
        base: local HF checkpoint folder with BERT's layer layout (BERT, RoBERTa, XLM-R, ELECTRA, …; any
            ``*ForSequenceClassification`` or sentence-transformers cross-encoder of those works too).
        dictionary: folder of a saved :class:`~jingpai.keyword_dict.Dictionary` (read at creation;
            a saved model carries its own copy).
        top_k_keywords: keywords taken per side (``KeywordExtractor(top_k=…)``).
        max_label: top label value; graded labels become soft targets ``label / max_label``.
        dropout: dropout before the classifier.
    """

    base: str | None = None
    dictionary: str | None = None
    top_k_keywords: int = 10
    max_label: float = 1.0
    dropout: float = 0.1


def keyword_attention_mask(side: torch.Tensor, keyword: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Which key each query position may attend to in the keyword layer.

    Args:
        side: ``[B, L]`` token roles (0 = [CLS]/[SEP]/padding, 1 = sentence A, 2 = sentence B).
        keyword: ``[B, L]`` bool, token lies inside a keyword.
        attention_mask: ``[B, L]`` 1 for real tokens, 0 for padding.

    Returns:
        ``[B, L, L]`` bool: A tokens → keyword tokens of B (all of B when B has none), B tokens →
        keyword tokens of A (all of A when A has none), [CLS]/[SEP] → every real token, every
        position → itself.
    """
    real = attention_mask.bool()
    is_a = (side == SIDE_A) & real
    is_b = (side == SIDE_B) & real
    kw_a = is_a & keyword
    kw_b = is_b & keyword
    keys_for_a = torch.where(kw_b.any(dim=1, keepdim=True), kw_b, is_b)
    keys_for_b = torch.where(kw_a.any(dim=1, keepdim=True), kw_a, is_a)
    special = (side == SPECIAL) & real
    allowed = (
        (is_a.unsqueeze(2) & keys_for_a.unsqueeze(1))
        | (is_b.unsqueeze(2) & keys_for_b.unsqueeze(1))
        | (special.unsqueeze(2) & real.unsqueeze(1))
    )
    eye = torch.eye(side.shape[1], dtype=torch.bool, device=side.device).unsqueeze(0)
    return allowed | eye


#: what kwbert needs of a backbone: BERT's layer layout (BERT, RoBERTa, XLM-R, ELECTRA, MiniLM, …)
BERT_LAYOUT = "encoder.layer[i].attention.self.query/key/value, attention.output, intermediate, output"


def layout_error(backbone: nn.Module, missing: str) -> ModelLoadError:
    """The error for a backbone without BERT's layer layout (DeBERTa-v2, ModernBERT, …), naming what to use instead."""
    model_type = getattr(getattr(backbone, "config", None), "model_type", "?")
    return ModelLoadError(
        f"kwbert copies the backbone's last layer and needs BERT's layer layout ({BERT_LAYOUT}: BERT, RoBERTa, XLM-R, "
        f"ELECTRA, …); {type(backbone).__name__} (model_type {model_type!r}) has no {missing}. "
        "Train cross or bertca on this checkpoint instead"
    )


def last_layer(backbone: nn.Module) -> nn.Module:
    """The backbone's last transformer layer, checked for BERT's layout.

    Raises:
        ModelLoadError: another layout (e.g. DeBERTa-v2's disentangled attention, ModernBERT's fused layers).
    """
    layers = getattr(getattr(backbone, "encoder", None), "layer", None)
    if layers is None:
        raise layout_error(backbone, "encoder.layer")
    layer = layers[-1]
    parts = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.self.num_attention_heads",
             "attention.self.attention_head_size", "attention.output", "intermediate", "output")
    for part in parts:
        node: object = layer
        for attr in part.split("."):
            node = getattr(node, attr, None)
        if node is None:
            raise layout_error(backbone, f"encoder.layer[-1].{part}")
    return layer


class KeywordLayer(nn.Module):
    """A copy of a BERT-layout layer run with an explicit boolean attention mask, returning its attention.

    The layer comes from :func:`last_layer`, which has checked the attributes used here.
    """

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.self_attn = layer.attention.self
        self.attn_output = layer.attention.output
        self.intermediate = layer.intermediate
        self.output = layer.output
        self.num_heads = self.self_attn.num_attention_heads
        self.head_size = self.self_attn.attention_head_size

    def forward(self, hidden: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, n, _ = hidden.shape

        def heads(x: torch.Tensor) -> torch.Tensor:
            return x.view(b, n, self.num_heads, self.head_size).transpose(1, 2)

        q = heads(self.self_attn.query(hidden))
        k = heads(self.self_attn.key(hidden))
        v = heads(self.self_attn.value(hidden))
        logits = (q @ k.transpose(-1, -2)) * self.head_size**-0.5
        logits = logits.masked_fill(~allowed.unsqueeze(1), torch.finfo(logits.dtype).min)
        probs = logits.softmax(dim=-1)
        context = (self.self_attn.dropout(probs) @ v).transpose(1, 2).reshape(b, n, -1)
        attended = self.attn_output(context, hidden)
        out = self.output(self.intermediate(attended), attended)
        return out, probs


class KeywordBertNet(nn.Module):
    """BERT + the parallel keyword-attentive layer + the 2-class classifier."""

    def __init__(self, backbone: nn.Module, *, dropout: float) -> None:
        super().__init__()
        self.backbone = backbone
        self.keyword_layer = KeywordLayer(copy.deepcopy(last_layer(backbone)))
        hidden = backbone.config.hidden_size
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(5 * hidden, 2)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        side: torch.Tensor,
        keyword: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        *,
        return_attention: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Class logits ``[B, 2]`` (and the keyword layer's attention ``[B, heads, L, L]`` when asked)."""
        kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, **kwargs)
        # hidden_states[-2] is what feeds the last layer: the keyword layer runs in parallel to it
        kw_hidden, probs = self.keyword_layer(out.hidden_states[-2], keyword_attention_mask(side, keyword, attention_mask))
        real = attention_mask.bool()
        pooled = []
        for role in (SIDE_A, SIDE_B):
            weights = ((side == role) & real).to(kw_hidden.dtype).unsqueeze(-1)
            pooled.append((kw_hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0))
        h_a, h_b = pooled
        features = torch.cat([out.last_hidden_state[:, 0], h_a, h_b, h_a - h_b, h_b - h_a], dim=-1)
        logits = self.classifier(self.dropout(features))
        return (logits, probs) if return_attention else logits


def load_dictionary(path: str | Path) -> Dictionary:
    """A saved keyword dictionary (``Dictionary.load``), with an error naming the folder."""
    from jingpai.keyword_dict import Dictionary

    try:
        return Dictionary.load(path)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"cannot load keyword dictionary from {path}: {exc}") from exc


def resolve_dictionary(given: Dictionary | None, *, assets: Path | None, configured: str | None) -> Dictionary | None:
    """The keyword dictionary a keyword model uses: the one given, else a saved model's own copy (none if
    it was saved without one), else the configured folder."""
    if given is not None:
        return given
    if assets is not None:
        # a saved model uses only the dictionary it was saved with
        return load_dictionary(assets / DICTIONARY_DIR) if (assets / DICTIONARY_DIR).exists() else None
    return load_dictionary(configured) if configured else None


class KeywordBertReranker(Reranker):
    """Keyword-attentive BERT matcher; score = P(match).

    Args:
        config: :class:`KwBertConfig`.
        device: torch device (``None``: CUDA when available).
        assets: saved model folder to rebuild from (used by :meth:`Reranker.load`).
        dictionary: keyword dictionary to use (overrides ``config.dictionary``). Without any, every
            side falls back to all of its tokens (logged).
    """

    name = "kwbert"
    reads_whole_text = True  # keywords are the whole text's top k
    config_class = KwBertConfig
    num_labels = 2

    def __init__(
        self,
        config: KwBertConfig,
        *,
        device: str | None = None,
        assets: Path | None = None,
        dictionary: Dictionary | None = None,
    ) -> None:
        super().__init__(config, device=device)
        if config.max_label <= 0:
            raise ValueError(f"max_label must be > 0, got {config.max_label}")
        self.config: KwBertConfig = config
        self.tokenizer, backbone = load_backbone(config.base, assets, architecture=self.name)
        if not getattr(self.tokenizer, "is_fast", False):
            raise ModelLoadError("kwbert needs a fast tokenizer (offset mappings locate keyword tokens)")
        self.net = KeywordBertNet(backbone, dropout=config.dropout).to(self.device)
        self.set_dictionary(resolve_dictionary(dictionary, assets=assets, configured=config.dictionary))

    def set_dictionary(self, dictionary: Dictionary | None) -> None:
        """Use ``dictionary`` for keywords from now on (and record its version)."""
        self.dictionary = dictionary
        self.keyword_dict_version = dictionary.version if dictionary is not None else None
        self._keywords = None
        if dictionary is None:
            logger.warning("kwbert has no keyword dictionary: the keyword layer falls back to all tokens of each side")
        else:
            from jingpai.keyword_dict import KeywordExtractor

            self._keywords = KeywordExtractor(dictionary, top_k=self.config.top_k_keywords)
        keywords = self._keywords
        self._cached_words = TextKeywords(
            keywords.words if keywords is not None else lambda text: (), top_k=self.config.top_k_keywords, version=self.keyword_dict_version,
        )

    def give_keywords(self, texts: Sequence[str], words: Sequence[Sequence[str] | None], *, version: str, top_k: int) -> int:
        """Known keywords of ``texts`` (an index's, ranked by dictionary ``version``): see :meth:`TextKeywords.give`."""
        return self._cached_words.give(texts, words, version=version, top_k=top_k)

    def keywords(self, text: str) -> list[str]:
        """The keywords of ``text`` the model uses (best first)."""
        return self._keywords.words(text) if self._keywords is not None else []

    def _keyword_spans(self, text: str, *, before: int | None = None) -> list[tuple[int, int]]:
        """The spans of the whole text's keywords (:meth:`keywords`, cached per text) that start before ``before``."""
        words = self._cached_words(text)
        if not words:
            return []
        from jingpai.keyword_dict.segment import keyword_spans  # here: keyword_dict loads rjieba

        return keyword_spans(text, words, before=before)

    def featurize(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        """Pair inputs plus ``side`` (token roles) and ``keyword`` (token inside a keyword of its side).

        Each side is read once (:func:`~jingpai.reranker.packed_pairs.pack_pairs`: a query shared by the pairs once, a
        document only as far as the cut reaches), the template and the roles are laid out for the whole batch at once,
        and a token's keyword flag is a prefix-sum lookup over its text's keyword characters. Tokenizers without a
        learned pair template take :meth:`featurize_by_tokenizer`, the same tensors from the tokenizer's call.
        """
        packed = pack_pairs(pair_encoder(self), pairs, max_length=self.config.max_length, offsets=True)
        if packed is None:
            return self.featurize_by_tokenizer(pairs)
        flags: dict[int, np.ndarray] = {}  # per distinct read (a shared query once)
        no_keywords = 0
        for (query, doc), q, d in zip(pairs, packed.queries, packed.docs, strict=True):
            for text, read in ((query, q), (doc, d)):
                if id(read) not in flags:
                    # only the keywords that start before the read's last token ends can touch its tokens
                    before = int(read.ends.max()) if len(read.ends) else 0
                    spans = self._keyword_spans(text, before=before)
                    flags[id(read)] = keyword_flags(spans, read.starts, read.ends, max(before, spans[-1][1]) if spans else before)
                no_keywords += not self._cached_words(text)
        keyword = packed.side_flags([flags[id(q)] for q in packed.queries], [flags[id(d)] for d in packed.docs])
        if no_keywords and self.dictionary is not None:
            logger.debug("%d of %d texts have no keyword: their tokens all take part in keyword attention", no_keywords, 2 * len(pairs))
        side = packed.roles(template=SPECIAL, query=SIDE_A, doc=SIDE_B)
        return {**packed.tensors, "side": torch.from_numpy(side), "keyword": torch.from_numpy(keyword)}

    def featurize_by_tokenizer(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        """:meth:`featurize` through the ``transformers`` tokenizer's own pair call, token by token (any fast
        tokenizer; the reference the array path is pinned against)."""
        queries = [q for q, _ in pairs]
        docs = [d for _, d in pairs]
        enc = self.tokenizer(
            queries, docs, padding=True, truncation="longest_first", max_length=self.config.max_length,
            return_offsets_mapping=True, return_tensors="pt",
        )
        offsets = enc.pop("offset_mapping")
        side = torch.zeros_like(enc["input_ids"])
        keyword = torch.zeros_like(enc["input_ids"], dtype=torch.bool)
        no_keywords = 0
        for i, (query, doc) in enumerate(pairs):
            spans = (self._keyword_spans(query), self._keyword_spans(doc))
            no_keywords += sum(1 for s in spans if not s)
            for j, seq in enumerate(enc.sequence_ids(i)):
                if seq is None:
                    continue
                side[i, j] = SIDE_A if seq == 0 else SIDE_B
                start, end = (int(x) for x in offsets[i, j])
                keyword[i, j] = any(start < e and end > s for s, e in spans[seq])
        if no_keywords and self.dictionary is not None:
            logger.debug("%d of %d texts have no keyword: their tokens all take part in keyword attention", no_keywords, 2 * len(pairs))
        return {**dict(enc), "side": side, "keyword": keyword}

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.net(**batch)

    def attention(self, pairs: Sequence[Pair]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """``(featurized batch, keyword-layer attention [B, heads, L, L])`` for inspection."""
        batch = self.featurize(pairs)
        self.net.eval()
        with torch.inference_mode():
            _, probs = self.net(**self.to_device(batch), return_attention=True)
        return batch, probs.cpu()

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.logits(batch).float().softmax(dim=-1)[:, 1]

    def loss(self, batch: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        log_probs = self.logits(batch).float().log_softmax(dim=-1)
        target = soft_targets(labels, self.config.max_label).to(log_probs.device)
        return -(target * log_probs[:, 1] + (1 - target) * log_probs[:, 0]).mean()

    def save_assets(self, directory: Path) -> None:
        save_backbone(directory, self.tokenizer, self.net.backbone.config)
        if self.dictionary is not None:
            self.dictionary.save(directory / DICTIONARY_DIR)

    @classmethod
    def from_assets(cls, config: RerankerConfig, directory: Path, *, device: str | None = None) -> KeywordBertReranker:
        if not isinstance(config, KwBertConfig):
            raise ModelLoadError(f"{directory}: expected a KwBertConfig, got {type(config).__name__}")
        return cls(config, device=device, assets=directory)


__all__ = ["KeywordBertReranker", "KwBertConfig", "keyword_attention_mask"]
